package main

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	kgo "github.com/segmentio/kafka-go"

	"github.com/onceq/onceq/outbox"
)

// With -redrive a run parks orders in the dead-letter queue or topic
// instead of sending them, and a refuser in the driver marks some of the
// pipeline's outbox entries DEAD (as a relay does when a destination
// refuses one); onceq redrive sends both back, two runs at once and then
// a third, while the workers, relays and shipping workers are killed.

// parkedReason is the reason the driver's parked dead letters carry.
const parkedReason = "parked by the chaos driver: a fault of the handler since fixed"

// refusedReason is the reason of the outbox entries the refuser marks DEAD.
const refusedReason = "refused by the chaos driver: a destination since fixed"

// parkPlan takes every twentieth order delivered once (no duplicate of it
// in ds) out of ds: those go straight to the dead-letter queue or topic,
// as if an earlier release had dead-lettered them, and only a redrive
// brings them to the workers.
func parkPlan(ds []delivery) (sent, parked []delivery) {
	count := map[string]int{}
	for _, d := range ds {
		count[d.id]++
	}
	n := 0
	for _, d := range ds {
		if count[d.id] == 1 && !strings.HasPrefix(d.id, "bad-") {
			if n++; n%20 == 0 {
				parked = append(parked, d)
				continue
			}
		}
		sent = append(sent, d)
	}
	return sent, parked
}

// parker is a broker whose dead-letter queue or topic the driver can
// park deliveries in, and onceq redrive redrive.
type parker interface {
	broker
	park(ctx context.Context, ds []delivery) error
	// redriveFrom are onceq redrive's flags that redrive the dead
	// letters; run names the run (a Kafka run's consumer group).
	redriveFrom(run string) []string
}

// park puts ds into the dead-letter queue, with their idempotency keys
// and a reason, as the SQS source dead-letters a message.
func (b *sqsBroker) park(ctx context.Context, ds []delivery) error {
	for i := 0; i < len(ds); i += 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(ds)); j++ {
			attrs := map[string]sqstypes.MessageAttributeValue{
				"onceq-dead-letter-reason": {DataType: aws.String("String"), StringValue: aws.String(parkedReason)}}
			if ds[j].key != "" {
				attrs["idempotency-key"] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(ds[j].key)}
			}
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(ds[j].body), MessageAttributes: attrs})
		}
		out, err := b.q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(b.dlqURL), Entries: entries})
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%d sends failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			return fmt.Errorf("park in the DLQ: %w", err)
		}
	}
	return nil
}

// redriveFrom: the dead-letter queue, back to the orders queue. Every run
// receives from the one queue, so a letter is moved by one of them.
func (b *sqsBroker) redriveFrom(string) []string {
	return []string{"-sqs-dlq", b.dlqURL, "-sqs-source", b.queueURL, "-hold", "30s"}
}

// park produces ds to the dead-letter topic with the headers the Kafka
// sources' dead letters carry (a reason and the original topic) and their
// idempotency keys, but no original offset: a worker's dead letter has
// one, the driver's parked letters do not (deadLetters tells them apart).
func (b *kafkaBroker) park(ctx context.Context, ds []delivery) error {
	w := &kgo.Writer{Addr: kgo.TCP(b.addr), Topic: b.dlq, Transport: b.tr, Balancer: &kgo.Hash{},
		RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 500}
	msgs := make([]kgo.Message, 0, len(ds))
	for _, d := range ds {
		m := kgo.Message{Key: []byte(d.id), Value: []byte(d.body), Headers: []kgo.Header{
			{Key: "onceq-dead-letter-reason", Value: []byte(parkedReason)}, {Key: "onceq-original-topic", Value: []byte(b.topic)}}}
		if d.key != "" {
			m.Headers = append(m.Headers, kgo.Header{Key: "idempotency-key", Value: []byte(d.key)})
		}
		msgs = append(msgs, m)
	}
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		_ = w.Close()
		return fmt.Errorf("park in %s: %w", b.dlq, err)
	}
	return w.Close()
}

// redriveFrom: the dead-letter topic, each letter back to its original
// topic, read by run's consumer group. The runs at once share a group, so
// that each letter is looked at by one of them; a later run in a group of
// its own looks at every letter again, those the first runs moved among
// them.
func (b *kafkaBroker) redriveFrom(run string) []string {
	return []string{"-kafka-dlt", b.dlq, "-kafka-brokers", b.addr, "-kafka-group", "chaos-redrive-" + run + "-" + b.group}
}

// tally is what the onceq redrive runs of one kind (dead letters or
// outbox entries) did, summed from their summary lines.
type tally struct {
	runs, moved, completed, held, passed, taken, failed, newer int
}

// redriveResult is what -redrive's onceq redrive runs did.
type redriveResult struct {
	parked int
	// refused counts the outbox entries the refuser marked DEAD, sent
	// the copies it sent to the shipping queue or topic before (as a
	// destination that took a message and answered with a refusal).
	refused, sent int
	// refuserLeased counts the entries the refuser leased, refused or not.
	refuserLeased    int
	letters, entries tally
	// deadLeft counts the outbox entries still DEAD at the end: each an
	// order whose shipping event no redrive sent back.
	deadLeft int
	// resets counts, by key_hash, the records the runs reset.
	resets map[string]int
	done   chan struct{}
	err    error
}

func (r *redriveResult) line() string {
	n := 0
	for _, c := range r.resets {
		n += c
	}
	l, e := r.letters, r.entries
	return fmt.Sprintf("chaos: redrive: parked=%d runs=%d moved=%d records_reset=%d completed=%d held=%d taken=%d newer=%d failed=%d outbox_dead=%d outbox_copies_sent=%d outbox_runs=%d outbox_requeued=%d outbox_taken=%d outbox_failed=%d outbox_dead_left=%d",
		r.parked, l.runs, l.moved, n, l.completed, l.held, l.taken, l.newer, l.failed, r.refused, r.sent, e.runs, e.moved, e.taken, e.failed, r.deadLeft)
}

var (
	summaryRE = regexp.MustCompile(`(\d+) looked at: moved (\d+), (\d+) completed \(not re-run\), (\d+) held by a worker, (\d+) passed over by the filter, (\d+) moved by another run, (\d+) failed, (\d+) newer`)
	resetRE   = regexp.MustCompile(`msg="redrive: moved" .*key_hash=([0-9a-f]{12}) .*why="record reset"`)
)

// redriveStore are onceq redrive's flags for the run's store and table.
func redriveStore(cfg settings, idem string) []string {
	args := []string{"redrive", "-table", idem}
	if cfg.store == "postgres" {
		args = append(args, "-store", "postgres", "-postgres-url", cfg.postgresURL)
	}
	return append(args, "-progress", "0")
}

// redriveOnce runs onceq redrive once and returns its summary line and
// the resets it logged, by key_hash.
func redriveOnce(ctx context.Context, onceqBin string, args []string, cfg settings) (string, map[string]int, error) {
	cmd := exec.CommandContext(ctx, onceqBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// The redrive reads and resets records straight in DynamoDB, past the
	// workers' fault proxy.
	cmd.Env = append(os.Environ(), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_SQS="+cfg.sqsURL, "AWS_ENDPOINT_URL_DYNAMODB="+cfg.dynamoDBURL)
	if err := cmd.Run(); err != nil {
		return out.String(), nil, fmt.Errorf("onceq redrive: %w: %s%s", err, out.String(), lastLines(errOut.Bytes(), 3))
	}
	resets := map[string]int{}
	for _, m := range resetRE.FindAllStringSubmatch(errOut.String(), -1) {
		resets[m[1]]++
	}
	return out.String(), resets, nil
}

// redrivePlan is what the redrives run: onceq redrive's flags for the
// dead letters (by run name) and for the outbox's DEAD entries.
type redrivePlan struct {
	letters func(run string) []string
	entries []string
	// stopRefusing is called before the last runs start: it stops the
	// refuser and returns once it made its last entry DEAD, so that the
	// last runs find every DEAD entry.
	stopRefusing func()
	// firstRefusal, when set, is closed once the refuser made an entry
	// DEAD: the first runs start after it.
	firstRefusal <-chan struct{}
}

// redrives runs onceq redrive on the dead letters and on the outbox's
// DEAD entries after delay: two of each at once, then, a while after they
// ended (by when the workers have dead-lettered more, among them letters
// the first two moved back, and the refuser has refused more entries,
// among them entries moved back), one more of each, while the workers are
// being killed. It closes r.done when all have ended.
func redrives(ctx context.Context, onceqBin string, p redrivePlan, cfg settings, delay time.Duration, logf func(string, ...any), r *redriveResult) {
	defer close(r.done)
	var mu sync.Mutex
	add := func(t *tally, what, out string, resets map[string]int, err error) {
		mu.Lock()
		defer mu.Unlock()
		t.runs++
		for k, v := range resets {
			r.resets[k] += v
		}
		if err != nil && r.err == nil {
			r.err = err
		}
		m := summaryRE.FindStringSubmatch(out)
		if m == nil {
			return
		}
		var n [8]int
		for i := range n {
			fmt.Sscan(m[i+1], &n[i])
		}
		t.moved += n[1]
		t.completed += n[2]
		t.held += n[3]
		t.passed += n[4]
		t.taken += n[5]
		t.failed += n[6]
		t.newer += n[7]
		logf("redrive of the %s, run %d: %s", what, t.runs, strings.TrimSpace(out))
	}
	// round runs n redrives of each kind at once and waits for them.
	round := func(n int, run string) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				out, resets, err := redriveOnce(ctx, onceqBin, p.letters(run), cfg)
				add(&r.letters, "dead letters", out, resets, err)
			})
			if p.entries != nil {
				wg.Go(func() {
					out, resets, err := redriveOnce(ctx, onceqBin, p.entries, cfg)
					add(&r.entries, "outbox's DEAD entries", out, resets, err)
				})
			}
		}
		wg.Wait()
	}
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			r.err = ctx.Err()
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(delay) {
		return
	}
	if p.firstRefusal != nil {
		// The first runs find an entry DEAD, unless none was refused in
		// a long while (the line's outbox_dead=0 then says so).
		select {
		case <-ctx.Done():
			r.err = ctx.Err()
			return
		case <-p.firstRefusal:
		case <-time.After(10 * max(delay, time.Second)):
		}
	}
	round(2, "first")
	if !wait(5 * delay) {
		return
	}
	if p.stopRefusing != nil {
		p.stopRefusing()
	}
	round(1, "again")
}

// redriveLeft is left, plus one while r's redrives run.
func redriveLeft(left func(context.Context) (int, string, error), r *redriveResult) func(context.Context) (int, string, error) {
	return func(ctx context.Context) (int, string, error) {
		n, desc, err := left(ctx)
		select {
		case <-r.done:
		default:
			n, desc = n+1, desc+", redrives running"
		}
		return n, desc, err
	}
}

// refuser is a relay of the driver's own that refuses some outbox
// entries: it leases Pending entries beside the relays, marks every tenth
// DEAD (the same entry at most twice, so that an entry redriven once can
// be refused and redriven again) and gives the others back at once. Half
// of those it refuses it first sends to the shipping queue or topic
// itself, as a destination that took the message but answered with a
// refusal: a redrive then sends a copy that had arrived, which the
// shipping workers must absorb.
type refuser struct {
	ob   outbox.Store
	ship broker
	r    *redriveResult
	logf func(string, ...any)
	stop chan struct{}
	done chan struct{}
	once sync.Once
	// first is closed at the first entry made DEAD.
	first chan struct{}
}

// chosen says whether the refuser refuses entry id, and sends it first.
func chosen(id string) (refuse, send bool) {
	h := fnv.New32a()
	h.Write([]byte(id))
	v := h.Sum32()
	return v%10 == 0, v/10%2 == 0
}

// run refuses until stop is closed, then closes done.
func (f *refuser) run(ctx context.Context) {
	defer close(f.done)
	refusals := map[string]int{}
	// Until the first refusal, often and many at a time (the first
	// redrives wait for it); then a few entries a few times a second:
	// each entry leased and given back is two writes, which must not load
	// the store more than the relays do.
	every, n := 50*time.Millisecond, 20
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.stop:
			return
		case <-time.After(every):
		}
		if f.r.refused > 0 {
			every, n = 250*time.Millisecond, 5
		}
		now := time.Now()
		es, err := f.ob.Lease(ctx, outbox.LeaseRequest{Owner: "chaos-refuser", Now: now, LeaseUntil: now.Add(time.Minute), Max: n})
		if err != nil {
			f.logf("refuser: lease: %v", err)
		}
		f.r.refuserLeased += len(es)
		for _, e := range es {
			refuse, send := chosen(e.ID)
			// The first entry leased is refused whatever its ID: on a
			// loaded machine the relays can lease nearly every entry
			// first, and a run with nothing refused tests no outbox
			// redrive.
			refuse = refuse || f.r.refused == 0
			if !refuse || refusals[e.ID] >= 2 {
				if err := f.ob.Release(ctx, e.Lease, "passed over by the chaos refuser", now, now); err != nil {
					f.logf("refuser: release: %v", err)
				}
				continue
			}
			if send && refusals[e.ID] == 0 {
				if err := f.ship.send(ctx, []delivery{{body: string(e.Body), key: e.ID, id: e.OrderingKey}}); err != nil {
					f.logf("refuser: send: %v", err)
				} else {
					f.r.sent++
				}
			}
			if err := f.ob.Dead(ctx, e.Lease, refusedReason, now, now.Add(24*time.Hour)); err != nil {
				f.logf("refuser: dead: %v", err)
				continue
			}
			refusals[e.ID]++
			if f.r.refused++; f.r.refused == 1 {
				close(f.first)
			}
		}
	}
}

// stopRefusing stops the refuser and waits until it has.
func (f *refuser) stopRefusing() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}
