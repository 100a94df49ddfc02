package outboxtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/sources/memsource"
)

// Case is what the suite needs of a Sender and its broker.
type Case struct {
	// Sender is the Sender under test.
	Sender outbox.Sender
	// Destination is a queue or topic that exists, as the Sender names
	// it (Entry.Destination).
	Destination string
	// Source opens a reader of Destination for a consumer downstream; the
	// suite closes it through the consumer.
	Source func(t *testing.T) broker.Source
	// Ordered says the destination keeps the order of the entries that
	// share an OrderingKey (a FIFO queue, a Kafka topic).
	Ordered bool
	// Missing is a destination that does not exist: the Sender must
	// refuse an entry to it.
	Missing string
	// TooLarge is a body Destination refuses as too large; nil: not
	// tested.
	TooLarge []byte
	// Invalid is a destination that no destination of the Sender's kind
	// can be (a topic name Kafka does not allow, a queue URL that is not
	// one): the Sender must refuse an entry to it. Empty: not tested. An
	// empty Destination, and one holding a control character, are tested
	// for every Sender.
	Invalid string
	// DropsCopies says the destination itself drops a copy of a message
	// sent again soon after (an SQS FIFO queue's deduplication ID): the
	// consumer downstream then sees each entry once.
	DropsCopies bool
	// Within bounds how long the consumer downstream may take to see
	// everything (default 60s).
	Within time.Duration
}

// Run runs every case of the suite.
func Run(t *testing.T, c Case) {
	if c.Within <= 0 {
		c.Within = 60 * time.Second
	}
	t.Run("RedispatchIsADuplicateDownstream", func(t *testing.T) { redispatch(t, c) })
	t.Run("Refusals", func(t *testing.T) { refusals(t, c) })
	t.Run("PipelineExactlyOnce", func(t *testing.T) { pipeline(t, c) })
}

// Entries are n entries to c.Destination in lanes lanes, as a relay would
// lease them: each with an ID, a header and its lane's OrderingKey.
func Entries(dest, input string, n, lanes int) []outbox.Entry {
	es := make([]outbox.Entry, n)
	for i := range es {
		es[i] = outbox.Entry{
			Message: outbox.Message{Destination: dest, OrderingKey: fmt.Sprintf("lane-%d", i%lanes),
				Body: fmt.Appendf(nil, `{"input":%q,"n":%d}`, input, i), Headers: map[string]string{"event-type": "test.sent"}},
			ID: outbox.ID(input, i), Seq: int64(i + 1), State: outbox.Pending, CreatedAt: time.Now(),
		}
	}
	return es
}

// Downstream is a consumer of a destination that records what it saw.
type Downstream struct {
	mu       sync.Mutex
	effects  map[string]int      // by key: runs whose effects committed
	bodies   map[string][]string // by OrderingKey, in processing order
	headers  map[string]string   // the event-type header of each key
	outcomes map[consumer.Kind]int
	byKey    map[string]map[consumer.Kind]int
}

// OnMessageOutcome implements consumer.HookMessageOutcome.
func (d *Downstream) OnMessageOutcome(_ context.Context, m *consumer.Message, o consumer.Outcome, _ time.Duration) {
	key := m.Attributes[broker.IdempotencyKeyAttribute]
	d.mu.Lock()
	d.outcomes[o.Kind]++
	if d.byKey[key] == nil {
		d.byKey[key] = map[consumer.Kind]int{}
	}
	d.byKey[key][o.Kind]++
	d.mu.Unlock()
}

// CountPrefix is how many messages whose key holds prefix ended in
// kind.
func (d *Downstream) CountPrefix(prefix string, kind consumer.Kind) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for k, kinds := range d.byKey {
		if strings.Contains(k, prefix) {
			n += kinds[kind]
		}
	}
	return n
}

// Count is how many messages ended in kind.
func (d *Downstream) Count(kind consumer.Kind) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.outcomes[kind]
}

// Effects returns, per key, how many times its effects committed.
func (d *Downstream) Effects() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.effects))
	for k, n := range d.effects {
		out[k] = n
	}
	return out
}

// RunDownstream runs an onceq consumer over src until the test ends or
// stop is called: its handler commits one effect per message, keyed by
// the message's idempotency-key attribute.
func RunDownstream(t *testing.T, src broker.Source) (d *Downstream, stop func()) {
	t.Helper()
	d = &Downstream{effects: map[string]int{}, bodies: map[string][]string{}, headers: map[string]string{}, outcomes: map[consumer.Kind]int{},
		byKey: map[string]map[consumer.Kind]int{}}
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		key := m.Attributes[broker.IdempotencyKeyAttribute]
		return consumer.Result{Writes: []dedup.Write{memstore.Write{Apply: func() {
			d.mu.Lock()
			d.effects[key]++
			d.bodies[m.OrderingKey] = append(d.bodies[m.OrderingKey], string(m.Body))
			d.headers[key] = m.Attributes["event-type"]
			d.mu.Unlock()
		}}}}, nil
	})
	cons, err := consumer.New(src, memstoretest.New(t), h, consumer.WithoutDeadLetters(), consumer.WithHooks(d),
		consumer.WithLogger(testenv.Logger(t)), consumer.PendingRecheck(200*time.Millisecond))
	if err != nil {
		t.Fatalf("consumer downstream: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cons.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("consumer downstream: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return d, stop
}

// sendRounds sends entries as a relay does: one entry of each lane per
// call, in lane order.
func sendRounds(t *testing.T, s outbox.Sender, entries []outbox.Entry) {
	t.Helper()
	lanes := map[string][]outbox.Entry{}
	var order []string
	for _, e := range entries {
		if _, ok := lanes[e.OrderingKey]; !ok {
			order = append(order, e.OrderingKey)
		}
		lanes[e.OrderingKey] = append(lanes[e.OrderingKey], e)
	}
	for round := 0; ; round++ {
		var batch []outbox.Entry
		for _, k := range order {
			if round < len(lanes[k]) {
				batch = append(batch, lanes[k][round])
			}
		}
		if len(batch) == 0 {
			return
		}
		for i, err := range s.Send(testenv.Context(t, 30*time.Second), batch) {
			if err != nil {
				t.Fatalf("send %s: %v", batch[i].ID, err)
			}
		}
	}
}

// redispatch: every entry is sent, then sent again (a relay that died
// between sending and marking): downstream, each commits its effect once,
// with the entry's ID as its key and its headers, and the copies are
// duplicates.
func redispatch(t *testing.T, c Case) {
	const n, lanes = 24, 4
	entries := Entries(c.Destination, "redispatch-"+t.Name(), n, lanes)
	sendRounds(t, c.Sender, entries)
	sendRounds(t, c.Sender, entries)
	copies := n
	if c.DropsCopies {
		copies = 0
	}
	markers := 0
	if c.DropsCopies {
		// One more message in each lane, sent after the copies: the
		// destination keeps a lane's order, so once every marker is seen, a
		// copy it failed to drop would have been seen before it.
		markers = lanes
		ms := Entries(c.Destination, "redispatch-marker-"+t.Name(), markers, lanes)
		sendRounds(t, c.Sender, ms)
		entries = append(entries, ms...) // each last in its lane
	}
	d, stop := RunDownstream(t, c.Source(t))
	testenv.Eventually(t, c.Within, "the consumer downstream did not see every copy", func() bool {
		return d.Count(consumer.Processed)+d.Count(consumer.Duplicate) >= n+copies+markers
	})
	stop()
	if p, dup := d.Count(consumer.Processed), d.Count(consumer.Duplicate); p != n+markers || dup != copies {
		t.Errorf("downstream: %d processed, %d duplicates; want %d and %d", p, dup, n+markers, copies)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range entries {
		if got := d.effects[e.ID]; got != 1 {
			t.Errorf("entry %d: its effect committed %d times, want once under its ID", e.Seq, got)
		}
		if h := d.headers[e.ID]; h != "test.sent" {
			t.Errorf("entry %d: header event-type %q, want test.sent", e.Seq, h)
		}
	}
	if c.Ordered {
		for lane, bodies := range d.bodies {
			var want []string
			for _, e := range entries {
				if e.OrderingKey == lane {
					want = append(want, string(e.Body))
				}
			}
			if !slices.Equal(bodies, want) {
				t.Errorf("lane %s processed as %v, want %v", lane, bodies, want)
			}
		}
	}
}

// sendsThenFails is a Sender whose first send of each entry reaches the
// destination and is then reported failed: a relay that sent and could
// not mark, which sends the entry again.
type sendsThenFails struct {
	outbox.Sender
	mu   sync.Mutex
	sent map[string]bool
}

var errAfterSend = errors.New("outboxtest: the acknowledgement was lost after the send")

func (s *sendsThenFails) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := s.Sender.Send(ctx, entries)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range entries {
		if errs[i] == nil && !s.sent[e.ID] {
			s.sent[e.ID] = true
			errs[i] = errAfterSend
		}
	}
	return errs
}

// pipeline: inputs processed by an onceq consumer whose handler sends
// onward commit their outgoing messages with COMPLETED; duplicates of the
// inputs send nothing again; a relay sends each entry twice (its first
// acknowledgement lost); downstream every outgoing message's effect
// commits exactly once.
func pipeline(t *testing.T, c Case) {
	const inputs, perInput = 12, 2
	prefix := t.Name() + "-order-"
	in := memsourcetest.NewQueue(t, "pipeline-in")
	for i := range inputs {
		for range 2 { // each input delivered twice
			if err := in.Send(context.Background(), memsource.Outgoing{Body: fmt.Appendf(nil, "order-%d", i),
				Attributes: map[string]string{broker.IdempotencyKeyAttribute: prefix + strconv.Itoa(i)}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	store := memstoretest.New(t)
	h := consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) (consumer.Result, error) {
		out := make([]outbox.Message, perInput)
		for j := range out {
			out[j] = outbox.Message{Destination: c.Destination, OrderingKey: string(m.Body),
				Body: fmt.Appendf(nil, "%s/%d", m.Body, j), Headers: map[string]string{"event-type": "test.sent"}}
		}
		return consumer.Result{Outbox: out}, nil
	})
	upstream, err := consumer.New(in.Source(), store, h, consumer.SendsOnward(), consumer.WithoutDeadLetters(),
		consumer.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		if err := upstream.Run(ctx); err != nil {
			t.Errorf("consumer upstream: %v", err)
		}
	})
	relay, err := outbox.NewRelay(store.Outbox(), &sendsThenFails{Sender: c.Sender, sent: map[string]bool{}},
		outbox.PollInterval(50*time.Millisecond), outbox.RetryBackoff(10*time.Millisecond, 100*time.Millisecond),
		outbox.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := relay.Run(ctx); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	const n = inputs * perInput
	copies := n
	if c.DropsCopies {
		copies = 0
	}
	d, stop := RunDownstream(t, c.Source(t))
	testenv.Eventually(t, c.Within, "the consumer downstream did not see every copy", func() bool {
		return d.CountPrefix(prefix, consumer.Processed)+d.CountPrefix(prefix, consumer.Duplicate) >= n+copies
	})
	stop()
	dispatched, err := store.Outbox().Entries(context.Background(), outbox.Dispatched, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(dispatched) != n {
		t.Errorf("%d entries dispatched, want %d: one per outgoing message, none for a duplicate input", len(dispatched), n)
	}
	if p, dup := d.CountPrefix(prefix, consumer.Processed), d.CountPrefix(prefix, consumer.Duplicate); p != n || dup != copies {
		t.Errorf("downstream: %d processed, %d duplicates; want %d and %d", p, dup, n, copies)
	}
	effects := 0
	for k, times := range d.Effects() {
		if !strings.Contains(k, prefix) {
			continue
		}
		effects++
		if times != 1 {
			t.Errorf("outgoing message %s: effect committed %d times", dedup.KeyHash(k), times)
		}
	}
	if effects != n {
		t.Errorf("%d outgoing messages had effects downstream, want %d", effects, n)
	}
}

// refusals: each entry no destination of the kind can take (an empty
// Destination, one with a control character, an invalid one, a missing
// one, a message too large) is refused for good with an
// *outbox.RefusedError, never failed for the moment (which a relay
// retries for ever), and an ordinary entry sent in the same call is
// taken.
func refusals(t *testing.T, c Case) {
	refuse := map[string]func(e *outbox.Entry){
		"EmptyDestination":   func(e *outbox.Entry) { e.Destination = "" },
		"ControlDestination": func(e *outbox.Entry) { e.Destination += "\nforged" },
	}
	if c.Invalid != "" {
		refuse["InvalidDestination"] = func(e *outbox.Entry) { e.Destination = c.Invalid }
	}
	if c.Missing != "" {
		refuse["MissingDestination"] = func(e *outbox.Entry) { e.Destination = c.Missing }
	}
	if c.TooLarge != nil {
		refuse["TooLarge"] = func(e *outbox.Entry) { e.OrderingKey, e.Body = "large", c.TooLarge }
	}
	for name, spoil := range refuse {
		t.Run(name, func(t *testing.T) {
			batch := Entries(c.Destination, "refusals-"+t.Name(), 2, 2)
			spoil(&batch[1])
			errs := c.Sender.Send(testenv.Context(t, 60*time.Second), batch)
			if len(errs) != len(batch) {
				t.Fatalf("Send returned %d results for %d entries", len(errs), len(batch))
			}
			if errs[0] != nil {
				t.Errorf("the ordinary entry beside the refused one: %v", errs[0])
			}
			var refused *outbox.RefusedError
			if !errors.Is(errs[1], outbox.ErrRefused) || !errors.As(errs[1], &refused) {
				t.Errorf("entry to %q of %d bytes: %v, want an *outbox.RefusedError", batch[1].Destination, len(batch[1].Body), errs[1])
			}
		})
	}
}
