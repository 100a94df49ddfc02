package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// An outgoing message within the 400 KB that the store documents and
// checks either commits or is refused with an *OutboxTooLargeError
// naming the message, never an error about the record.
func TestReviewOutboxEntryWithinTheCheckedLimit(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	l := claimAt(t, s, "test#large", now)
	err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: "k", Body: make([]byte, 300<<10)}}})
	var tl *dynamostore.OutboxTooLargeError
	if err != nil && !errors.As(err, &tl) {
		t.Fatalf("Complete with a message of 300 KB: %v; want success or an *OutboxTooLargeError", err)
	}
}

// sentIDs takes every entry and remembers the IDs it took.
type sentIDs struct {
	mu  sync.Mutex
	ids map[string]int
}

func (s *sentIDs) Send(_ context.Context, es []outbox.Entry) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[string]int{}
	}
	for _, e := range es {
		s.ids[e.ID]++
	}
	return make([]error, len(es))
}

func (s *sentIDs) count(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ids[id]
}

// An item of the outbox table the relay cannot read (written by hand, or
// damaged) is named in an error, and holds up no other lane: the
// entries behind it in other lanes are still sent.
func TestReviewUnreadableEntryHoldsUpNoOtherLane(t *testing.T) {
	s, client, _ := outboxStore(t)
	now := time.Now()
	sk := "00000000000000000001#0000000000000000"
	_, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(dynamostore.OutboxTable(s.Table())), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "l#damaged"}, "sk": &types.AttributeValueMemberS{Value: sk},
		"psk": &types.AttributeValueMemberS{Value: sk}, "pq": &types.AttributeValueMemberS{Value: "p#0"},
		"id": &types.AttributeValueMemberB{Value: []byte("damaged#out0")}, "state": &types.AttributeValueMemberS{Value: "PENDING"},
		"headers": &types.AttributeValueMemberB{Value: []byte{5}}, "version": &types.AttributeValueMemberN{Value: "0"},
		"attempts": &types.AttributeValueMemberN{Value: "0"}, "lease_ms": &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#healthy", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: "k", Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	sent := &sentIDs{}
	relay, err := outbox.NewRelay(s.Outbox(), sent)
	if err != nil {
		t.Fatal(err)
	}
	var passErr error
	for range 5 {
		if _, err := relay.Pass(t.Context()); err != nil {
			passErr = err
		}
	}
	if sent.count(outbox.ID("test#healthy", 0)) != 1 {
		t.Fatalf("the healthy entry was not sent in 5 passes; their last error: %v", passErr)
	}
}

// A pass whose Lease fails part way (a throttle past the retries) gives
// back, or sends, the entries it had taken already: none is left leased
// and unsent until its lease runs out.
func TestReviewLeaseFailingPartWayStrandsNoEntry(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	direct := dynamoClient(t, ep, nil)
	table := recordsTable(t, direct, dynamostore.WithOutbox())
	p := faultproxy.Start(t, ep, faultproxy.WithSeed(42))
	s := newStore(t, direct, table)
	viaProxy := newStore(t, dynamoClient(t, p.URL(), nil), table, dynamostore.WithRetryPolicy(fastPolicy(1)))
	now := time.Now()
	if _, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#two-lanes", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: "a", Body: []byte("1")}, {Destination: "q", OrderingKey: "b", Body: []byte("2")}}}); err != nil {
		t.Fatal(err)
	}
	sent := &sentIDs{}
	relay, err := outbox.NewRelay(viaProxy.Outbox(), sent, outbox.LeaseTTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// The pass's one transaction is throttled, and then, of the takes one
	// by one it falls back to, the second: the first entry is taken
	// already.
	p.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Nth: 1, Fault: faultproxy.Throttle})
	p.AddRule(faultproxy.Rule{Op: "UpdateItem", Nth: 2, Fault: faultproxy.Throttle})
	if _, err := relay.Pass(t.Context()); err == nil {
		t.Fatal("the pass whose second take was throttled reports no error")
	}
	p.ClearRules()
	for range 3 {
		if _, err := relay.Pass(t.Context()); err != nil {
			t.Fatalf("Pass: %v", err)
		}
	}
	for i := range 2 {
		if sent.count(outbox.ID("test#two-lanes", i)) == 0 {
			t.Fatalf("entry %d not sent after the throttle passed; it waits for its lease of an hour", i)
		}
	}
}

// The errors of the outbox and of batch mode name the table they met, as
// every other error of the store does.
func TestReviewOutboxAndBatchErrorsNameTheirTable(t *testing.T) {
	s, client, _ := outboxStore(t)
	outboxTable := dynamostore.OutboxTable(s.Table())
	now := time.Now()

	// A mark of a lease this Outbox never gave.
	err := s.Outbox().Dispatched(t.Context(), []outbox.Lease{{ID: "test#x#out0", Owner: "r", Version: 1}}, now, now.Add(time.Hour))
	if !errors.Is(err, outbox.ErrLeaseLost) || !strings.Contains(err.Error(), outboxTable) {
		t.Errorf("a lost lease's mark: %v; want ErrLeaseLost naming %s", err, outboxTable)
	}

	// An item of the outbox table the relay cannot read.
	sk := "00000000000000000001#0000000000000000"
	if _, err := client.PutItem(t.Context(), &ddb.PutItemInput{TableName: aws.String(outboxTable), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "l#damaged"}, "sk": &types.AttributeValueMemberS{Value: sk},
		"psk": &types.AttributeValueMemberS{Value: sk}, "pq": &types.AttributeValueMemberS{Value: "p#0"},
		"id": &types.AttributeValueMemberB{Value: []byte("damaged#out0")}, "state": &types.AttributeValueMemberS{Value: "SENT?"},
		"version": &types.AttributeValueMemberN{Value: "0"}, "attempts": &types.AttributeValueMemberN{Value: "0"},
	}}); err != nil {
		t.Fatal(err)
	}
	_, err = s.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err == nil || !strings.Contains(err.Error(), outboxTable) {
		t.Errorf("an unreadable entry: %v; want an error naming %s", err, outboxTable)
	}

	// A stale owner's commit.
	bs := s.Offsets()
	p, stale := acquired(t, bs, 0)
	if _, err := bs.Acquire(t.Context(), p, "other"); err != nil {
		t.Fatal(err)
	}
	err = bs.Commit(t.Context(), batch.Commit{Lease: stale, From: 0, Next: 1, Now: now})
	if offsets := dynamostore.OffsetsTable(s.Table()); !errors.Is(err, batch.ErrFenced) || !strings.Contains(err.Error(), offsets) {
		t.Errorf("a stale owner's commit: %v; want ErrFenced naming %s", err, offsets)
	}
}

// The transaction's 4 MB counts every business write, an Update's values
// as a Put's item: a commit past it is refused before the call with an
// *OutboxTooLargeError, not by DynamoDB.
func TestReviewTransactionLimitCountsUpdates(t *testing.T) {
	s, client, c := outboxStore(t)
	inv := newInventory(t, client)
	now := time.Now()
	msgs := make([]outbox.Message, 19)
	for i := range msgs {
		msgs[i] = outbox.Message{Destination: "q", Body: make([]byte, 200<<10)}
	}
	up := dynamostore.Write{Update: &types.Update{TableName: aws.String(inv.table),
		Key:                       map[string]types.AttributeValue{"sku": &types.AttributeValueMemberS{Value: "big"}},
		UpdateExpression:          aws.String("SET payload = :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberB{Value: make([]byte, 350<<10)}}}}
	before := c.get("TransactWriteItems")
	_, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#txn", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour),
		Writes: []dedup.Write{up}, Outbox: msgs})
	var tl *dynamostore.OutboxTooLargeError
	if !errors.As(err, &tl) || tl.Limit != "transaction" {
		t.Fatalf("a commit of 4.2 MB: %v; want an *OutboxTooLargeError for the transaction", err)
	}
	if n := c.get("TransactWriteItems") - before; n != 0 {
		t.Fatalf("%d transactions sent, want none", n)
	}
}

// Many lanes at the front of a shard of the pending index, all held (a
// destination that is down: each lane's head waits out its backoff),
// hide no lane behind them: a newer entry to another destination is
// still leased. Each lane here is one order of a queue that is down.
func TestReviewHeldLanesHideNoOther(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	shard := dynamostore.PendingShard("up", "k")
	var down []outbox.Message
	for i := 0; len(down) < 40; i++ {
		if key := "order" + strconv.Itoa(i); dynamostore.PendingShard("down", key) == shard {
			down = append(down, outbox.Message{Destination: "down", OrderingKey: key, Body: []byte("b")})
		}
	}
	if _, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#down", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Outbox: down}); err != nil {
		t.Fatal(err)
	}
	ob := s.Outbox()
	held, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r1", Now: now, LeaseUntil: now.Add(time.Minute), Max: len(down)})
	if err != nil || len(held) != len(down) {
		t.Fatalf("holding the lanes of the queue that is down: %d leased, %v", len(held), err)
	}
	later := now.Add(time.Second)
	if _, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#up", Owner: "w", Now: later, ExpiresAt: later.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "up", OrderingKey: "k", Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	got, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r2", Now: later, LeaseUntil: later.Add(time.Minute), Max: 10})
	if err != nil || len(got) != 1 || got[0].Destination != "up" {
		t.Fatalf("lease behind %d held lanes: %d entries, %v; want the entry to the queue that is up", len(down), len(got), err)
	}
}

// Two workers (two Stores) commit events of one order in turn, the
// second's clock 2s behind the first's, within the 5s skew margin the
// store allows: the relay sends them in the order they committed.
func TestReviewLaneOrderAcrossWorkersWithSkewedClocks(t *testing.T) {
	a, client, _ := outboxStore(t)
	b := newStore(t, client, a.Table())
	now := time.Now()
	for _, c := range []struct {
		st   *dynamostore.Store
		key  string
		now  time.Time
		body string
	}{{a, "test#created", now, "created"}, {b, "test#paid", now.Add(-2 * time.Second), "paid"}} {
		if _, err := c.st.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: c.key, Owner: "w", Now: c.now, SkewMargin: 5 * time.Second,
			ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{{Destination: "q", OrderingKey: "order-1", Body: []byte(c.body)}}}); err != nil {
			t.Fatalf("commit of %s: %v", c.body, err)
		}
	}
	got, err := a.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err != nil || len(got) != 2 {
		t.Fatalf("lease: %d entries, %v", len(got), err)
	}
	if string(got[0].Body) != "created" {
		t.Fatalf("lane order %s, %s; want created (committed first), paid", got[0].Body, got[1].Body)
	}
}

// An outgoing message with no Destination is the handler's fault, found
// at commit: a typed permanent error that dead-letters the input, not an
// entry that no Sender can ever send, retried for ever.
func TestReviewOutgoingMessageWithoutDestination(t *testing.T) {
	s, _, _ := outboxStore(t)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Outbox: []outbox.Message{{Body: []byte("b")}}}, nil
	})
	g, err := consumer.NewGuard(s, h, consumer.SendsOnward())
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(t.Context(), &consumer.Message{ID: "m", Body: []byte("b"), Deliveries: 1})
	es, _ := s.Outbox().Entries(t.Context(), "", 0)
	var ue *outbox.UndeliverableError
	if o.Kind != consumer.DeadLettered || !errors.As(o.Err, &ue) || ue.Index != 0 || len(es) != 0 {
		t.Fatalf("outcome %v (%v), %d entries; want dead-lettered with an *outbox.UndeliverableError for message 0, none stored", o.Kind, o.Err, len(es))
	}
}
