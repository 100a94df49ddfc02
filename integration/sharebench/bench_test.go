package sharebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
)

// The topic of both benchmarks: six partitions of 1 KiB records, each with
// its own idempotency-key header, read by 16 handlers on each side.
const (
	partitions = 6
	workers    = 16
)

type fixture struct {
	addr, topic string
	records     int
}

func newFixture(b *testing.B, records int) *fixture {
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(partitions, "orders"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	f := &fixture{addr: c.ListenAddrs()[0], topic: "orders", records: records}
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.DefaultProduceTopic(f.topic), kgo.ProducerLinger(0))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	body := make([]byte, 1024)
	recs := make([]*kgo.Record, records)
	for i := range recs {
		v := append([]byte(nil), body...)
		copy(v, fmt.Sprintf("record %d", i))
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%1000), Value: v,
			Headers: []kgo.RecordHeader{{Key: "idempotency-key", Value: fmt.Appendf(nil, "r-%d", i)}}}
	}
	for len(recs) > 0 {
		n := min(len(recs), 2000)
		if err := cl.ProduceSync(context.Background(), recs[:n]...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		recs = recs[n:]
	}
	return f
}

// group is a new share group that reads the topic from its start.
func (f *fixture) group(b *testing.B, name string) string {
	g := name + "-" + suffix()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrIncrementalAlterConfigsRequest()
	r := kmsg.NewIncrementalAlterConfigsRequestResource()
	r.ResourceType, r.ResourceName = kmsg.ConfigResourceTypeGroupConfig, g
	c := kmsg.NewIncrementalAlterConfigsRequestResourceConfig()
	c.Name, c.Op, c.Value = "share.auto.offset.reset", kmsg.IncrementalAlterConfigOpSet, kmsg.StringPtr("earliest")
	r.Configs = append(r.Configs, c)
	req.Resources = append(req.Resources, r)
	resp, err := req.RequestWith(context.Background(), cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.Resources[0].ErrorCode)
	}
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sides runs raw and onceq b.N times each, alternating, each under a
// profile label (side=raw or onceq, for go tool pprof -tagfocus), and
// reports their records/s, the ratio and the process's CPU per record.
func sides(b *testing.B, records int, raw, onceq func(i int) time.Duration) {
	var rawTime, onceqTime, rawCPU, onceqCPU time.Duration
	timed := func(side string, wall, cpu *time.Duration, run func() time.Duration) {
		pprof.Do(context.Background(), pprof.Labels("side", side), func(context.Context) {
			start := proccpu.Used()
			*wall += run()
			*cpu += proccpu.Used() - start
		})
	}
	b.ResetTimer()
	for i := range b.N {
		timed("raw", &rawTime, &rawCPU, func() time.Duration { return raw(i) })
		timed("onceq", &onceqTime, &onceqCPU, func() time.Duration { return onceq(i) })
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(records*b.N) / d.Seconds() }
	perMsg := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(records*b.N) }
	b.ReportMetric(rate(rawTime), "raw_msgs/s")
	b.ReportMetric(rate(onceqTime), "onceq_msgs/s")
	b.ReportMetric(rate(onceqTime)/rate(rawTime), "ratio")
	b.ReportMetric(perMsg(rawCPU), "raw_cpu-us/msg")
	b.ReportMetric(perMsg(onceqCPU), "onceq_cpu-us/msg")
}

// BenchmarkShareMemory: the price of exactly once on a share group. A raw
// franz-go share consumer that accepts every record with no dedup, against
// the consumer over the share-group source and the memory store (claim,
// no-op handler, complete, accept); each side reads every record once,
// under its own group, timed from the client's creation to the last record
// settled. CPU is the whole process's, the in-process broker's included.
func BenchmarkShareMemory(b *testing.B) {
	const records = 20000
	f := newFixture(b, records)
	sides(b, records,
		func(int) time.Duration { return f.rawAccept(b, f.group(b, "raw")) },
		func(int) time.Duration {
			group := f.group(b, "onceq")
			store, err := memstore.New()
			if err != nil {
				b.Fatal(err)
			}
			return f.runConsumer(b, group, store, records)
		})
}

// rawAccept reads every record with one share client, accepting each.
func (f *fixture) rawAccept(b *testing.B, group string) time.Duration {
	start := time.Now()
	cl := f.shareClient(b, group)
	for n := 0; n < f.records; {
		fs := cl.PollRecords(context.Background(), 500)
		fs.EachRecord(func(r *kgo.Record) { r.Ack(kgo.AckAccept); n++ })
	}
	if err := cl.FlushAcks(context.Background()); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	cl.Close()
	return took
}

func (f *fixture) shareClient(b *testing.B, group string) *kgo.Client {
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.ShareGroup(group), kgo.ConsumeTopics(f.topic))
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// runConsumer runs the consumer over the share-group source and store,
// 16 handlers doing nothing, until records messages are processed.
func (f *fixture) runConsumer(b *testing.B, group string, store dedup.Store, records int) time.Duration {
	start := time.Now()
	src, err := sharesource.New(context.Background(), []string{f.addr}, group, []string{f.topic},
		sharesource.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	done := &counter{}
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	c, err := consumer.New(src, store, h, consumer.Concurrency(workers), consumer.WithHooks(done), consumer.WithoutDeadLetters(),
		consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- c.Run(ctx) }()
	<-done.reach(int64(records))
	took := time.Since(start)
	cancel()
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
	return took
}

// counter counts processed messages and closes a channel at a bound.
type counter struct {
	n    atomic.Int64
	once sync.Once
	at   int64
	ch   chan struct{}
	mu   sync.Mutex
}

func (c *counter) reach(n int64) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at, c.ch = n, make(chan struct{})
	if c.n.Load() >= n {
		close(c.ch)
	}
	return c.ch
}

func (c *counter) OnMessageOutcome(context.Context, *consumer.Message, consumer.Outcome, time.Duration) {
	n := c.n.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil && n == c.at {
		c.once.Do(func() { close(c.ch) })
	}
}

// BenchmarkSharePostgres: the share-group source on PostgreSQL (claim,
// no-op handler, complete, accept; 16 handlers) against a hand-written
// franz-go share consumer that, for each record of a poll, 16 at once,
// makes a claim and a complete statement (the minimal ones of the
// PostgreSQL store rows: an INSERT … ON CONFLICT DO UPDATE … WHERE expired
// RETURNING, a fenced UPDATE to COMPLETED) and accepts the record after
// its commit, then polls again. Each side a new records table per run,
// timed from its client's creation to the last record settled.
func BenchmarkSharePostgres(b *testing.B) {
	const records = 5000
	pgURL := testenv.PostgresURL(b)
	f := newFixture(b, records)
	pool, err := pgxpool.New(context.Background(), pgURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	table := func(name string) string {
		t := "sharebench_" + name + "_" + suffix()
		if err := pgstore.CreateTable(context.Background(), pool, t); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE "+t) })
		return t
	}
	sides(b, records,
		func(int) time.Duration { return f.handWritten(b, pool, f.group(b, "hand"), table("hand")) },
		func(int) time.Duration {
			group, t := f.group(b, "onceq"), table("onceq")
			st, err := pgstore.New(pool, pgstore.WithTable(t))
			if err != nil {
				b.Fatal(err)
			}
			return f.runConsumer(b, group, st, records)
		})
}

// handWritten is the hand-written share consumer of BenchmarkSharePostgres.
func (f *fixture) handWritten(b *testing.B, pool *pgxpool.Pool, group, table string) time.Duration {
	claim := "INSERT INTO " + table + ` AS r (id, status, version, owner, payload_hash, response, attempts, last_error, created_at, expires_at)
	VALUES ($1, 'PENDING', 1, $2, $3, NULL, 0, '', $4, $5)
	ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, version = r.version + 1, owner = EXCLUDED.owner,
		payload_hash = EXCLUDED.payload_hash, response = EXCLUDED.response, expires_at = EXCLUDED.expires_at
	WHERE r.expires_at < $4 RETURNING version`
	complete := "UPDATE " + table + " SET status = 'COMPLETED', version = version + 1, response = $3, expires_at = $4 WHERE id = $1 AND owner = $2 AND status = 'PENDING'"
	process := func(ctx context.Context, r *kgo.Record) error {
		key := r.Headers[0].Value
		now := time.Now()
		var v int64
		if err := pool.QueryRow(ctx, claim, key, "hand", "h", now, now.Add(time.Minute)).Scan(&v); err != nil {
			return err
		}
		tag, err := pool.Exec(ctx, complete, key, "hand", []byte("ok"), now.Add(time.Hour))
		if err == nil && tag.RowsAffected() != 1 {
			err = errors.New("lease lost")
		}
		return err
	}
	start := time.Now()
	cl := f.shareClient(b, group)
	ctx := context.Background()
	recs := make(chan *kgo.Record)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	for range workers {
		go func() {
			for r := range recs {
				if err := process(ctx, r); err != nil {
					failed.CompareAndSwap(nil, &err)
					r.Ack(kgo.AckRelease)
				} else {
					r.Ack(kgo.AckAccept)
				}
				wg.Done()
			}
		}()
	}
	for n := 0; n < f.records; {
		fs := cl.PollRecords(ctx, 500)
		fs.EachRecord(func(r *kgo.Record) {
			wg.Add(1)
			recs <- r
			n++
		})
		wg.Wait() // every record of this poll settled before the next poll
	}
	close(recs)
	if err := cl.FlushAcks(ctx); err != nil {
		b.Fatal(err)
	}
	took := time.Since(start)
	cl.Close()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	return took
}
