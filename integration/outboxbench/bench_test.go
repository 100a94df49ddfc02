package outboxbench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/franzsource"
)

// The workload: committers business transactions at once, each an
// order's row and one outgoing message of bodySize bytes keyed by the
// order, messages per phase; rounds of each side in turn.
const (
	committers = 8
	bodySize   = 1024
	partitions = 6
	batchSize  = 100
)

// env is an integer setting from the environment, or def.
func env(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// tracer counts the round trips of a pool's connections (each statement,
// BEGIN and COMMIT among them, and each pipeline whole).
type tracer struct{ n atomic.Int64 }

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	return ctx
}
func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}
func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// backends are the server processes of a pool's connections, whose CPU
// time is the server's work for this side (PostgreSQL on this machine).
type backends struct {
	mu   sync.Mutex
	pids []int
}

func (b *backends) add(pid int) {
	b.mu.Lock()
	b.pids = append(b.pids, pid)
	b.mu.Unlock()
}

// cpu is the backends' CPU time so far, from /proc (0 where unreadable:
// a server on another machine).
func (b *backends) cpu() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ticks int64
	for _, pid := range b.pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(raw)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			k, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + k
		}
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// side is one outbox under test, on a pool of its own.
type side struct {
	name string
	pool *pgxpool.Pool
	rt   *tracer
	be   *backends
	// commit commits order key's business transaction with its message
	// to topic, ordered by lane (onceq only: the others keep no order).
	commit func(ctx context.Context, topic, key, lane string) error
	// drain sends what is committed to topic until ctx ends.
	drain func(ctx context.Context, topic string) error
}

func newPool(b *testing.B) (*pgxpool.Pool, *tracer, *backends) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	rt, be := &tracer{}, &backends{}
	cfg.ConnConfig.Tracer = rt
	cfg.MaxConns = committers + 4
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		be.add(int(c.PgConn().PID()))
		return nil
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p, rt, be
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// counter counts the records the broker took, per topic.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(topic string, n int) {
	c.mu.Lock()
	c.n[topic] += n
	c.mu.Unlock()
}

func (c *counter) get(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[topic]
}

// kafkaOut is a Watermill publisher over franz-go (Watermill's own Kafka
// publisher rides Sarama, not served here): each Publish produces its
// messages and waits for their acknowledgements, as Watermill's does.
type kafkaOut struct {
	cl  *kgo.Client
	got *counter
}

func (k *kafkaOut) Publish(topic string, msgs ...*message.Message) error {
	rs := make([]*kgo.Record, len(msgs))
	for i, m := range msgs {
		rs[i] = &kgo.Record{Topic: topic, Key: []byte(m.Metadata.Get("key")), Value: m.Payload,
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: []byte(m.UUID)}}}
	}
	if err := k.cl.ProduceSync(context.Background(), rs...).FirstErr(); err != nil {
		return err
	}
	k.got.add(topic, len(rs))
	return nil
}

func (k *kafkaOut) Close() error { return nil }

// countingSender counts what the relay's Sender had taken.
type countingSender struct {
	outbox.Sender
	got *counter
}

// KeepsLaneOrder passes on the wrapped Sender's answer.
func (c *countingSender) KeepsLaneOrder() bool {
	ls, ok := c.Sender.(outbox.LaneSender)
	return ok && ls.KeepsLaneOrder()
}

func (c *countingSender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := c.Sender.Send(ctx, entries)
	taken := map[string]int{}
	for i, err := range errs {
		if err == nil {
			taken[entries[i].Destination]++
		}
	}
	for t, n := range taken {
		c.got.add(t, n)
	}
	return errs
}

// figures are one phase's.
type figures struct {
	rate, clientCPU, serverCPU, roundTrips float64
}

// BenchmarkOutboxVsWatermill runs, per round and per side in turn: the
// commit phase alone (committers, nothing relayed), the drain of what it
// committed alone, then both at once on fresh messages (end to end, from
// the first commit to the last record the broker took). Sides: onceq's
// PostgreSQL outbox (ClaimComplete with the order's INSERT and the
// message, an outbox.Relay to franz-go), Watermill's forwarder
// (forwarder.NewPublisher over watermill-sql in the business transaction,
// forwarder.NewForwarder to Kafka), and a raw loop (INSERT of the order
// and of the message; a drainer of SKIP LOCKED batches, produced, then
// deleted). OUTBOXBENCH_MESSAGES (10000) per phase, OUTBOXBENCH_ROUNDS
// (5); OUTBOXBENCH_LANES orders onceq's messages in that many lanes
// (OrderingKey) rather than one per order.
func BenchmarkOutboxVsWatermill(b *testing.B) {
	messages := env("OUTBOXBENCH_MESSAGES", 10000)
	rounds := env("OUTBOXBENCH_ROUNDS", 5)
	lanes := env("OUTBOXBENCH_LANES", 0)
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.DefaultNumPartitions(partitions), kfake.AllowAutoTopicCreation())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	got := &counter{n: map[string]int{}}
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.AllowAutoTopicCreation(), kgo.ProducerLinger(0))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(cl.Close)
		return cl
	}
	body := make([]byte, bodySize)
	id := suffix()
	sides := []*side{onceqSide(b, id, body, newClient(), got), watermillSide(b, id, body, newClient(), got), rawSide(b, id, body, newClient(), got)}

	res := map[string]map[string][]figures{}
	for _, s := range sides {
		res[s.name] = map[string][]figures{}
	}
	for n := range b.N {
		for r := range rounds {
			for _, s := range sides {
				run := fmt.Sprintf("%s-%d-%d", id, n, r)
				topic := "t-" + s.name + "-" + run
				commit := measure(s, messages, func() { commitAll(b, s, run+"-c", topic, messages, lanes) })
				drain := measure(s, messages, func() { drainUntil(b, s, topic, got, messages, nil) })
				e2e := measure(s, messages, func() {
					drainUntil(b, s, topic+"-e2e", got, messages, func() { commitAll(b, s, run+"-e", topic+"-e2e", messages, lanes) })
				})
				res[s.name]["commit"] = append(res[s.name]["commit"], commit)
				res[s.name]["drain"] = append(res[s.name]["drain"], drain)
				res[s.name]["e2e"] = append(res[s.name]["e2e"], e2e)
				b.Logf("round %d %s: msgs/s end to end %.0f, commit %.0f, drain %.0f; server CPU µs/msg %.0f, %.0f, %.0f; round trips/msg %.2f, %.2f, %.2f",
					r, s.name, e2e.rate, commit.rate, drain.rate, e2e.serverCPU, commit.serverCPU, drain.serverCPU, e2e.roundTrips, commit.roundTrips, drain.roundTrips)
			}
		}
	}
	med := func(xs []figures, f func(figures) float64) float64 {
		v := make([]float64, len(xs))
		for i, x := range xs {
			v[i] = f(x)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	rate := func(x figures) float64 { return x.rate }
	for _, s := range sides {
		r := res[s.name]
		e2e := med(r["e2e"], rate)
		b.ReportMetric(e2e, s.name+"_msgs/s")
		slowest := slices.MinFunc(r["e2e"], func(a, b figures) int { return cmpf(a.rate, b.rate) }).rate
		b.ReportMetric(slowest, s.name+"_slowest_msgs/s")
		b.ReportMetric(slowest/e2e, s.name+"_slowest_vs_median")
		b.ReportMetric(med(r["commit"], rate), s.name+"_commit_msgs/s")
		b.ReportMetric(med(r["drain"], rate), s.name+"_drain_msgs/s")
		b.ReportMetric(med(r["e2e"], func(x figures) float64 { return x.clientCPU }), s.name+"_client_cpu-us/msg")
		b.ReportMetric(med(r["e2e"], func(x figures) float64 { return x.serverCPU }), s.name+"_server_cpu-us/msg")
		b.ReportMetric(med(r["e2e"], func(x figures) float64 { return x.roundTrips }), s.name+"_round-trips/msg")
	}
	on, wm, raw := med(res["onceq"]["e2e"], rate), med(res["watermill"]["e2e"], rate), med(res["raw"]["e2e"], rate)
	b.ReportMetric(on/wm, "vs_watermill")
	b.ReportMetric(on/raw, "vs_raw")
}

func cmpf(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// measure times f and counts, per message, this process's CPU, the side's
// server backends' CPU and its round trips.
func measure(s *side, messages int, f func()) figures {
	cpu, srv, rts, start := proccpu.Used(), s.be.cpu(), s.rt.n.Load(), time.Now()
	f()
	el := time.Since(start)
	per := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(messages) }
	return figures{
		rate:       float64(messages) / el.Seconds(),
		clientCPU:  per(proccpu.Used() - cpu),
		serverCPU:  per(s.be.cpu() - srv),
		roundTrips: float64(s.rt.n.Load()-rts) / float64(messages),
	}
}

// commitAll commits messages orders of run, their messages to topic,
// committers at a time.
func commitAll(b *testing.B, s *side, run, topic string, messages, lanes int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range committers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= messages {
					return
				}
				key := run + "-" + strconv.Itoa(i)
				lane := key
				if lanes > 0 {
					lane = "lane-" + strconv.Itoa(i%lanes)
				}
				if err := s.commit(context.Background(), topic, key, lane); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// drainUntil runs the side's drain to topic, and alongside (not nil)
// during, until the broker took messages records for topic.
func drainUntil(b *testing.B, s *side, topic string, got *counter, messages int, during func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.drain(ctx, topic) }()
	if during != nil {
		during()
	}
	for got.get(topic) < messages {
		time.Sleep(time.Millisecond) // a benchmark's wait for its count, not a test's proof
	}
	cancel()
	if err := <-done; err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
}

// onceqSide: ClaimComplete with the order's INSERT and its message; a
// Relay with the franz-go Sender, woken by the outbox's notifications.
func onceqSide(b *testing.B, id string, body []byte, cl *kgo.Client, got *counter) *side {
	p, rt, be := newPool(b)
	ctx := context.Background()
	table := "outboxbench_onceq_" + id
	if err := pgstore.CreateTable(ctx, p, table); err != nil {
		b.Fatal(err)
	}
	orders := table + "_orders"
	mustExec(b, p, "CREATE TABLE "+orders+" (id text PRIMARY KEY, body bytea NOT NULL)")
	b.Cleanup(func() {
		_, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+pgstore.OutboxTable(table)+", "+orders+", "+pgstore.OffsetsTable(table))
		_, _ = p.Exec(context.Background(), "DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(table))
	})
	store, err := pgstore.New(p, pgstore.WithTable(table))
	if err != nil {
		b.Fatal(err)
	}
	sender, err := franzsource.NewSender(cl)
	if err != nil {
		b.Fatal(err)
	}
	s := &side{name: "onceq", pool: p, rt: rt, be: be}
	s.commit = func(ctx context.Context, topic, key, lane string) error {
		now := time.Now()
		c, err := store.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: key, Owner: "bench", Now: now, ExpiresAt: now.Add(time.Hour),
			Writes: []dedup.Write{pgstore.Exec{SQL: "INSERT INTO " + orders + " (id, body) VALUES ($1, $2)", Args: []any{key, body}}},
			Outbox: []outbox.Message{{Destination: topic, OrderingKey: lane, Body: body}}})
		if err == nil && !c.Acquired {
			err = fmt.Errorf("order %s: not acquired", key)
		}
		return err
	}
	s.drain = func(ctx context.Context, topic string) error {
		relay, err := outbox.NewRelay(store.Outbox(), &countingSender{Sender: sender, got: got}, outbox.BatchSize(batchSize),
			outbox.WakeOn(store.Outbox().(*pgstore.Outbox).Wait), outbox.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			return err
		}
		return relay.Run(ctx)
	}
	return s
}

// watermillSide: in the business transaction, the order's INSERT and a
// forwarder.NewPublisher over watermill-sql's publisher on that
// transaction; a forwarder.Forwarder reading the SQL topic and
// publishing to Kafka.
func watermillSide(b *testing.B, id string, body []byte, cl *kgo.Client, got *counter) *side {
	p, rt, be := newPool(b)
	orders := "outboxbench_wm_" + id + "_orders"
	mustExec(b, p, "CREATE TABLE "+orders+" (id text PRIMARY KEY, body bytea NOT NULL)")
	fwdTopic := "outboxbench_wm_" + id
	schema := wsql.DefaultPostgreSQLSchema{}
	logger := watermill.NopLogger{}
	// The table, made once beforehand: a publisher on a transaction may
	// not make it.
	init, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(p), wsql.SubscriberConfig{SchemaAdapter: schema,
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true}, logger)
	if err != nil {
		b.Fatal(err)
	}
	if err := init.SubscribeInitialize(fwdTopic); err != nil {
		b.Fatal(err)
	}
	_ = init.Close()
	b.Cleanup(func() {
		_, _ = p.Exec(context.Background(), `DROP TABLE IF EXISTS `+orders+`, "watermill_`+fwdTopic+`", "watermill_offsets_`+fwdTopic+`"`)
	})
	s := &side{name: "watermill", pool: p, rt: rt, be: be}
	s.commit = func(ctx context.Context, topic, key, _ string) error {
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, body) VALUES ($1, $2)", key, body); err != nil {
			return err
		}
		sp, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: schema}, logger)
		if err != nil {
			return err
		}
		pub := forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: fwdTopic})
		m := message.NewMessage(key, body)
		m.Metadata.Set("key", key)
		if err := pub.Publish(topic, m); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	s.drain = func(ctx context.Context, _ string) error {
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(p), wsql.SubscriberConfig{SchemaAdapter: schema,
			OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}, InitializeSchema: true, PollInterval: 10 * time.Millisecond}, logger)
		if err != nil {
			return err
		}
		f, err := forwarder.NewForwarder(sub, &kafkaOut{cl: cl, got: got}, logger, forwarder.Config{ForwarderTopic: fwdTopic})
		if err != nil {
			return err
		}
		err = f.Run(ctx)
		_ = f.Close()
		return err
	}
	return s
}

// rawSide: BEGIN, the order's INSERT, the message's INSERT, COMMIT; a
// drainer that takes up to a batch FOR UPDATE SKIP LOCKED, produces it,
// deletes it and commits: at least once, with no order kept and nothing
// recorded of what was sent.
func rawSide(b *testing.B, id string, body []byte, cl *kgo.Client, got *counter) *side {
	p, rt, be := newPool(b)
	orders := "outboxbench_raw_" + id + "_orders"
	ob := "outboxbench_raw_" + id
	mustExec(b, p, "CREATE TABLE "+orders+" (id text PRIMARY KEY, body bytea NOT NULL)")
	mustExec(b, p, "CREATE TABLE "+ob+" (id bigserial PRIMARY KEY, topic text NOT NULL, key text NOT NULL, body bytea NOT NULL)")
	b.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders+", "+ob) })
	s := &side{name: "raw", pool: p, rt: rt, be: be}
	s.commit = func(ctx context.Context, topic, key, _ string) error {
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := tx.Exec(ctx, "INSERT INTO "+orders+" (id, body) VALUES ($1, $2)", key, body); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+ob+" (topic, key, body) VALUES ($1, $2, $3)", topic, key, body); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	s.drain = func(ctx context.Context, _ string) error {
		for ctx.Err() == nil {
			n, err := rawPass(ctx, p, cl, ob, got)
			if err != nil {
				return err
			}
			if n < batchSize {
				t := time.NewTimer(10 * time.Millisecond)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		}
		return nil
	}
	return s
}

// rawPass is one batch of the raw drainer.
func rawPass(ctx context.Context, p *pgxpool.Pool, cl *kgo.Client, ob string, got *counter) (int, error) {
	tx, err := p.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	rows, err := tx.Query(ctx, "SELECT id, topic, key, body FROM "+ob+" ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED", batchSize)
	if err != nil {
		return 0, err
	}
	var ids []int64
	var rs []*kgo.Record
	for rows.Next() {
		var id int64
		r := &kgo.Record{}
		var key string
		if err := rows.Scan(&id, &r.Topic, &key, &r.Value); err != nil {
			return 0, err
		}
		r.Key = []byte(key)
		ids, rs = append(ids, id), append(rs, r)
	}
	if err := rows.Err(); err != nil || len(rs) == 0 {
		return 0, err
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, "DELETE FROM "+ob+" WHERE id = ANY($1)", ids); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	got.add(rs[0].Topic, len(rs))
	return len(rs), nil
}

func mustExec(b *testing.B, p *pgxpool.Pool, sql string) {
	b.Helper()
	if _, err := p.Exec(context.Background(), sql); err != nil {
		b.Fatal(err)
	}
}
