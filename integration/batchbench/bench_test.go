package batchbench_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/sidebyside"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

const (
	partitions = 6
	batchSize  = 500
)

// counting counts a batch.Store's calls and the records its commits took.
type counting struct {
	batch.Store
	calls, records atomic.Int64
}

func (c *counting) Acquire(ctx context.Context, p batch.Partition, member string) (batch.Lease, error) {
	c.calls.Add(1)
	return c.Store.Acquire(ctx, p, member)
}

func (c *counting) Commit(ctx context.Context, cm batch.Commit) error {
	c.calls.Add(1)
	err := c.Store.Commit(ctx, cm)
	if err == nil {
		c.records.Add(cm.Next - cm.From)
	}
	return err
}

// settled counts the consumer's settled messages.
type settled struct{ n atomic.Int64 }

func (s *settled) OnMessageSettled(context.Context, *consumer.Message, consumer.Action, error) {
	s.n.Add(1)
}

func suffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fixture is an in-process Kafka broker holding the records, and
// PostgreSQL.
type fixture struct {
	addr, topic string
	records     int
	pg          *pgxpool.Pool
}

func newFixture(b *testing.B, records int) *fixture {
	pgURL := testenv.PostgresURL(b)
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
	recs := make([]*kgo.Record, records)
	for i := range recs {
		recs[i] = &kgo.Record{Key: fmt.Appendf(nil, "k%d", i%1000), Value: fmt.Appendf(nil, `{"order_id":"o-%d","sku":"sku-%d","qty":1}`, i, i%100)}
	}
	if err := cl.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		b.Fatal(err)
	}
	if f.pg, err = pgxpool.New(context.Background(), pgURL); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(f.pg.Close)
	return f
}

// table makes a table of the inserts, and returns its INSERT.
func (f *fixture) table(b *testing.B, name string) string {
	if _, err := f.pg.Exec(context.Background(), "CREATE TABLE "+name+" (id text PRIMARY KEY, body bytea NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = f.pg.Exec(context.Background(), "DROP TABLE "+name) })
	return "INSERT INTO " + name + " (id, body) VALUES ($1, $2)"
}

func (f *fixture) idemTable(b *testing.B, name string) *pgstore.Store {
	if err := pgstore.CreateTable(context.Background(), f.pg, name); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = f.pg.Exec(context.Background(), "DROP TABLE "+name) })
	s, err := pgstore.New(f.pg, pgstore.WithTable(name))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func groupOptions() []franzsource.Option {
	return []franzsource.Option{kafkagroup.HeartbeatInterval(100 * time.Millisecond), kafkagroup.FetchMaxWait(100 * time.Millisecond),
		kafkagroup.RevokeTimeout(2 * time.Second), kafkagroup.WithLogger(slog.New(slog.DiscardHandler))}
}

// raw is a plain franz-go group loop applying each poll's inserts in one
// PostgreSQL transaction, then committing the group's offsets: no
// exactly once (a crash between the two inserts the records again).
func (f *fixture) raw(b *testing.B, group, insert string) time.Duration {
	ctx := context.Background()
	start := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.addr), kgo.ConsumerGroup(group), kgo.ConsumeTopics(f.topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	for n := 0; n < f.records; {
		fs := cl.PollRecords(ctx, batchSize)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		if err := pgx.BeginFunc(ctx, f.pg, func(tx pgx.Tx) error {
			var q pgx.Batch
			fs.EachRecord(func(r *kgo.Record) {
				q.Queue(insert, fmt.Sprintf("%s/%d/%d", r.Topic, r.Partition, r.Offset), r.Value)
			})
			return tx.SendBatch(ctx, &q).Close()
		}); err != nil {
			b.Fatal(err)
		}
		n += fs.NumRecords()
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// batchMode runs franzsource's batch mode over PostgreSQL's offset rows,
// each batch's inserts committed with its partition's offset.
func (f *fixture) batchMode(b *testing.B, group, insert string, store *counting) time.Duration {
	start := time.Now()
	h := batch.HandlerFunc(func(_ context.Context, msgs []*broker.Message) ([]dedup.Write, error) {
		ws := make([]dedup.Write, len(msgs))
		for i, m := range msgs {
			ws[i] = pgstore.Exec{SQL: insert, Args: []any{m.ID, m.Body}}
		}
		return ws, nil
	})
	r, err := batch.NewRunner(store, h, batch.MaxRecords(batchSize), batch.Window(50*time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	src, err := franzsource.NewBatch(context.Background(), []string{f.addr}, group, []string{f.topic}, r, groupOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	return runUntil(b, start, src.Run, func() bool { return store.records.Load() >= int64(f.records) })
}

// runUntil runs run until done holds, and returns the time from start.
func runUntil(b *testing.B, start time.Time, run func(context.Context) error, done func() bool) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- run(ctx) }()
	for !done() {
		time.Sleep(time.Millisecond)
	}
	took := time.Since(start)
	cancel()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	return took
}

// perMessage runs the consumer over franzsource and the PostgreSQL
// store: each record claimed, its insert committed with COMPLETED.
func (f *fixture) perMessage(b *testing.B, group, insert string, store *pgstore.Store) time.Duration {
	start := time.Now()
	src, err := franzsource.New(context.Background(), []string{f.addr}, group, []string{f.topic}, groupOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	acks := &settled{}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Writes: []dedup.Write{pgstore.Exec{SQL: insert, Args: []any{m.ID, m.Body}}}}, nil
	})
	c, err := consumer.New(src, store, h, consumer.Concurrency(16), consumer.MaxInFlight(512),
		consumer.WithHooks(acks), consumer.WithoutDeadLetters(), consumer.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	return runUntil(b, start, c.Run, func() bool { return acks.n.Load() >= int64(f.records) })
}

// BenchmarkBatchPostgres reads the same records (six partitions) three
// ways in one run, each under its own group, each applying one INSERT
// per record to PostgreSQL: a raw franz-go loop (a transaction per poll
// of up to 500 records, then the group commit; no exactly once), batch
// mode over franzsource (batches of up to 500 per partition, each
// committed with its partition's offset row), and per-message mode (the
// consumer, 16 handlers, each record claimed and completed with its
// insert). Each timing runs from the client's creation to the last
// record committed. msgs/store_call is the records per offset-row call
// of batch mode (Acquire and Commit).
func BenchmarkBatchPostgres(b *testing.B) {
	const records = 20000
	f := newFixture(b, records)
	var rawT, batchT, perT time.Duration
	var calls int64
	b.ResetTimer()
	for range b.N {
		s := suffix()
		rawT += f.raw(b, "raw-"+s, f.table(b, "bench_raw_"+s))
		idem := f.idemTable(b, "bench_idem_"+s)
		store := &counting{Store: idem.Offsets()}
		batchT += f.batchMode(b, "batch-"+s, f.table(b, "bench_batch_"+s), store)
		calls += store.calls.Load()
		perT += f.perMessage(b, "permsg-"+s, f.table(b, "bench_permsg_"+s), idem)
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(records*b.N) / d.Seconds() }
	b.ReportMetric(rate(rawT), "raw_msgs/s")
	b.ReportMetric(rate(batchT), "batch_msgs/s")
	b.ReportMetric(rate(perT), "permsg_msgs/s")
	b.ReportMetric(rate(batchT)/rate(rawT), "vs_raw")
	b.ReportMetric(rate(batchT)/rate(perT), "vs_permsg")
	b.ReportMetric(float64(records*b.N)/float64(calls), "msgs/store_call")
}

// BenchmarkBatchPostgresInterleaved sets batch mode beside the raw
// consumer of BenchmarkBatchPostgres in rounds that take turns (the side
// that goes first alternating), each pass a new group reading the same
// records from the start into a table of its own, so that a machine whose
// load drifts moves both sides alike: vs_min is the median of the rounds'
// own ratios, batch mode over raw, and slowest_vs_min the lowest.
func BenchmarkBatchPostgresInterleaved(b *testing.B) {
	// Passes long enough that a group's join is a small part of each.
	const (
		records = 100000
		rounds  = 6
	)
	f := newFixture(b, records)
	batchPass := func(b *testing.B) (int64, time.Duration) {
		s := suffix()
		store := &counting{Store: f.idemTable(b, "bench_idem_"+s).Offsets()}
		return records, f.batchMode(b, "batch-"+s, f.table(b, "bench_batch_"+s), store)
	}
	rawPass := func(b *testing.B) (int64, time.Duration) {
		s := suffix()
		return records, f.raw(b, "raw-"+s, f.table(b, "bench_raw_"+s))
	}
	b.ResetTimer()
	for range b.N {
		sidebyside.Alternate(b, rounds, batchPass, rawPass)
	}
}
