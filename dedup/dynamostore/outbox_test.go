package dynamostore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// outboxStore is a store on fresh records and outbox tables, its client
// counting every call into c.
func outboxStore(t *testing.T) (*dynamostore.Store, *ddb.Client, *calls) {
	t.Helper()
	c := &calls{}
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), c)
	table := recordsTable(t, client, dynamostore.WithOutbox())
	return newStore(t, client, table), client, c
}

func claimAt(t *testing.T, s *dynamostore.Store, key string, now time.Time) dedup.Lease {
	t.Helper()
	c, err := s.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "w", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !c.Acquired {
		t.Fatalf("claim: %+v, %v", c, err)
	}
	return c.Lease
}

// The 100 items of a transaction (the record, the business writes, an
// item per outgoing message), each item's 400 KB and the transaction's
// 4 MB are counted before the call: a commit past one is refused with a
// typed error naming the limit, and nothing is sent.
func TestOutboxLimitsCheckedBeforeTheCall(t *testing.T) {
	s, _, c := outboxStore(t)
	now := time.Now()
	l := claimAt(t, s, "test#limits", now)
	small := func(n int) []outbox.Message {
		m := make([]outbox.Message, n)
		for i := range m {
			m[i] = outbox.Message{Destination: "q", Body: []byte("b")}
		}
		return m
	}
	big := func(n, size int) []outbox.Message {
		m := small(n)
		for i := range m {
			m[i].Body = make([]byte, size)
		}
		return m
	}
	write := dynamostore.Write{ConditionCheck: &types.ConditionCheck{TableName: aws.String(s.Table()),
		Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "x"}}, ConditionExpression: aws.String("attribute_not_exists(pk)")}}
	before := c.get("TransactWriteItems")
	for name, tc := range map[string]struct {
		writes []dedup.Write
		msgs   []outbox.Message
		check  func(error) bool
	}{
		"100 items": {writes: []dedup.Write{write}, msgs: small(99), check: func(err error) bool {
			var tm *dedup.TooManyWritesError
			return errors.As(err, &tm) && tm.Got == 100 && tm.Max == 99
		}},
		"an item over 400 KB": {msgs: append(small(1), big(1, 401<<10)...), check: func(err error) bool {
			var tl *dynamostore.OutboxTooLargeError
			return errors.As(err, &tl) && tl.Limit == "item" && tl.Index == 1 && errors.Is(err, dedup.ErrRecordTooLarge)
		}},
		"a transaction over 4 MB": {msgs: big(11, 390<<10), check: func(err error) bool {
			var tl *dynamostore.OutboxTooLargeError
			return errors.As(err, &tl) && tl.Limit == "transaction" && tl.Max == 4<<20 && errors.Is(err, dynamostore.ErrOutboxTooLarge)
		}},
	} {
		err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour), Writes: tc.writes, Outbox: tc.msgs})
		if !tc.check(err) {
			t.Fatalf("%s: Complete: %v", name, err)
		}
		_, err = s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: "test#limits-cc", Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour), Writes: tc.writes, Outbox: tc.msgs})
		if !tc.check(err) {
			t.Fatalf("%s: ClaimComplete: %v", name, err)
		}
	}
	if n := c.get("TransactWriteItems"); n != before {
		t.Fatalf("%d transactions sent, want none", n-before)
	}
	// What fits commits: 99 messages beside the record.
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Response: []byte("ok"), Now: now, ExpiresAt: now.Add(time.Hour), Outbox: small(99)}); err != nil {
		t.Fatalf("Complete with 99 messages: %v", err)
	}
	if es, err := s.Outbox().Entries(t.Context(), outbox.Pending, 0); err != nil || len(es) != 99 {
		t.Fatalf("%d entries (%v), want 99", len(es), err)
	}
}

// A message whose outgoing messages never fit is the message's fault: a
// Guard dead-letters it, committing nothing.
func TestOutboxTooLargeDeadLetters(t *testing.T) {
	s, _, _ := outboxStore(t)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) {
		return consumer.Result{Outbox: []outbox.Message{{Destination: "q", Body: make([]byte, 500<<10)}}}, nil
	})
	g, err := consumer.NewGuard(s, h, consumer.SendsOnward())
	if err != nil {
		t.Fatal(err)
	}
	o := g.Process(t.Context(), &consumer.Message{ID: "m", Body: []byte("b"), Deliveries: 1})
	if o.Kind != consumer.DeadLettered || !errors.Is(o.Err, dynamostore.ErrOutboxTooLarge) {
		t.Fatalf("outcome %v (%v), want dead-lettered for ErrOutboxTooLarge", o.Kind, o.Err)
	}
	if es, _ := s.Outbox().Entries(t.Context(), "", 0); len(es) != 0 {
		t.Fatalf("entries %+v, want none", es)
	}
}

// Destinations, ordering keys and headers are any bytes, as Kafka keys
// and headers are; dispatched and dead entries carry the table's TTL.
func TestOutboxItems(t *testing.T) {
	s, client, _ := outboxStore(t)
	now := time.Now()
	m := outbox.Message{Destination: "topic\xff", OrderingKey: "key\x00\xfe", Body: []byte{0, 0xff},
		Headers: map[string]string{"a\xff": "\x00", "b": strings.Repeat("v", 300)}}
	key := "test#" + strings.Repeat("k", 3000)
	l := claimAt(t, s, key, now)
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: []outbox.Message{m}}); err != nil {
		t.Fatal(err)
	}
	ob := s.Outbox()
	es, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	if err != nil || len(es) != 1 {
		t.Fatalf("Lease: %+v, %v", es, err)
	}
	e := es[0]
	if e.ID != outbox.ID(key, 0) || e.Destination != m.Destination || e.OrderingKey != m.OrderingKey || string(e.Body) != string(m.Body) ||
		len(e.Headers) != 2 || e.Headers["a\xff"] != "\x00" || e.Headers["b"] != m.Headers["b"] {
		t.Fatalf("entry %+v, want %+v", e, m)
	}
	// An Outbox that did not lease the entry cannot mark it.
	other, err := dynamostore.New(client, dynamostore.WithTable(s.Table()))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Outbox().Dispatched(t.Context(), []outbox.Lease{e.Lease}, now, now.Add(time.Hour)); !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("Dispatched through another Outbox: %v, want ErrLeaseLost", err)
	}
	if err := ob.Dispatched(t.Context(), []outbox.Lease{e.Lease}, now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// The entry's item, and its lane's counter: both expire.
	out, err := client.Scan(t.Context(), &ddb.ScanInput{TableName: aws.String(dynamostore.OutboxTable(s.Table()))})
	if err != nil || len(out.Items) != 2 {
		t.Fatalf("scan: %d items, %v; want the entry and its lane's counter", len(out.Items), err)
	}
	for _, it := range out.Items {
		if _, ok := it["expires_at"]; !ok {
			t.Fatalf("item %v has no expires_at", it)
		}
	}
	it := out.Items[0]
	if sk := it["sk"].(*types.AttributeValueMemberS).Value; sk == "lane" {
		it = out.Items[1]
	}
	for _, gone := range []string{"pq", "psk"} {
		if _, ok := it[gone]; ok {
			t.Fatalf("dispatched item keeps %s, which lists it as Pending", gone)
		}
	}
	ttl, err := client.DescribeTimeToLive(t.Context(), &ddb.DescribeTimeToLiveInput{TableName: aws.String(dynamostore.OutboxTable(s.Table()))})
	if err != nil || ttl.TimeToLiveDescription == nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "expires_at" {
		t.Fatalf("outbox table TTL: %+v, %v", ttl, err)
	}
}

// CreateOutboxTable is idempotent and the Outbox's Check passes on what
// it makes; a records table made without it has no outbox, and Check
// says so.
func TestOutboxTable(t *testing.T) {
	client := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, client)
	s := newStore(t, client, table)
	check := func() error { return s.Outbox().(*dynamostore.Outbox).Check(t.Context()) }
	if err := check(); err == nil {
		t.Fatal("Check of an outbox table never made: no error")
	}
	for range 2 {
		if err := dynamostore.CreateOutboxTable(t.Context(), client, table); err != nil {
			t.Fatalf("CreateOutboxTable: %v", err)
		}
	}
	if err := check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	if n := dynamostore.OutboxTable(strings.Repeat("t", 255)); len(n) > 255 || n == dynamostore.OutboxTable(strings.Repeat("t", 254)+"u") {
		t.Fatalf("outbox table %q: want a distinct name within 255 characters", n)
	}
}

// A long lane at the front of the pending index hides no lane behind it
// while its head is held: Lease reads further pages to find them.
func TestOutboxLongLaneHidesNoOther(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	long := make([]outbox.Message, 60)
	for i := range long {
		long[i] = outbox.Message{Destination: "q", OrderingKey: "long", Body: []byte("b")}
	}
	l := claimAt(t, s, "test#long", now)
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: long}); err != nil {
		t.Fatal(err)
	}
	ob := s.Outbox()
	held, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r1", Now: now, LeaseUntil: now.Add(time.Minute), Max: 1})
	if err != nil || len(held) != 1 || held[0].OrderingKey != "long" {
		t.Fatalf("first lease: %+v, %v", held, err)
	}
	// A lane of the same shard of the pending index, behind the long one.
	other := "other"
	for i := 0; dynamostore.PendingShard("q", other) != dynamostore.PendingShard("q", "long"); i++ {
		other = "other" + strconv.Itoa(i)
	}
	later := now.Add(time.Second)
	l2 := claimAt(t, s, "test#other", later)
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l2, Now: later, ExpiresAt: later.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: other, Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	// Max 10: a page is 40 index entries, all of the long lane.
	got, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r2", Now: later, LeaseUntil: later.Add(time.Minute), Max: 10})
	if err != nil || len(got) != 1 || got[0].OrderingKey != other {
		t.Fatalf("lease behind a held long lane: %+v, %v; want the other lane's entry", got, err)
	}
}

// A missing records table, and a missing outbox table beside a records
// table, are each a *TableNotFoundError naming that table, Misconfigured,
// from Check and from the relay's calls.
func TestMissingTablesNamed(t *testing.T) {
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	absent := uniqueName("absent")
	wantMissing := func(what string, err error, table string) {
		t.Helper()
		var tnf *dynamostore.TableNotFoundError
		if !errors.As(err, &tnf) || tnf.Table != table || retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), table) {
			t.Errorf("%s: %v (%v), want a *TableNotFoundError for %s, Misconfigured", what, err, retry.Classify(err), table)
		}
		if err != nil {
			if at := testenv.EmptySegment(err.Error()); at != "" {
				t.Errorf("%s: %q has an empty segment at %s", what, err, at)
			}
		}
	}
	wantMissing("Check of a missing records table", newStore(t, c, absent).Check(t.Context()), absent)
	_, err := newStore(t, c, absent).Claim(t.Context(), dedup.ClaimRequest{Key: "k", Owner: "w", Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	wantMissing("Claim on a missing records table", err, absent)
	_, err = newStore(t, c, absent).Get(t.Context(), "k")
	wantMissing("Get on a missing records table", err, absent)
	table := recordsTable(t, c) // no outbox table
	ob := newStore(t, c, table).Outbox().(*dynamostore.Outbox)
	wantMissing("the outbox's Check", ob.Check(t.Context()), dynamostore.OutboxTable(table))
	_, err = ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Max: 10, Now: time.Now(), LeaseUntil: time.Now().Add(time.Minute)})
	wantMissing("Lease", err, dynamostore.OutboxTable(table))
}

// An entry at the very edge of the checked item limit commits, and the
// relay's marks still fit it, with the longest reason and a long owner
// token; one byte more is refused before the call, typed. (The keys
// are of one length, so that the entries differ in their bodies only.)
func TestOutboxEntryAtTheLimitCommitsAndIsMarked(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	commit := func(key string, body int) error {
		_, err := s.ClaimComplete(t.Context(), dedup.ClaimCompleteRequest{Key: key, Owner: "w", Now: now, ExpiresAt: now.Add(time.Hour),
			Outbox: []outbox.Message{{Destination: "q", OrderingKey: "k", Body: make([]byte, body)}}})
		return err
	}
	var tl *dynamostore.OutboxTooLargeError
	if err := commit("test#size-a", 400<<10); !errors.As(err, &tl) {
		t.Fatalf("a body of 400 KiB: %v, want an *OutboxTooLargeError", err)
	}
	edge := 400<<10 - (tl.Size - tl.Max)
	if err := commit("test#size-b", edge+1); !errors.As(err, &tl) {
		t.Fatalf("a body one byte past the edge: %v, want an *OutboxTooLargeError", err)
	}
	if err := commit("test#size-c", edge); err != nil {
		t.Fatalf("a body of %d bytes, at the checked limit: %v", edge, err)
	}
	ob, owner, reason := s.Outbox(), strings.Repeat("o", 128), strings.Repeat("é", 1000)
	take := func(at time.Time) outbox.Lease {
		es, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: owner, Now: at, LeaseUntil: at.Add(time.Hour), Max: 1})
		if err != nil || len(es) != 1 {
			t.Fatalf("Lease: %d entries, %v", len(es), err)
		}
		return es[0].Lease
	}
	if err := ob.Retry(t.Context(), take(now), reason, now, now); err != nil {
		t.Fatalf("Retry of the entry at the limit: %v", err)
	}
	if err := ob.Release(t.Context(), take(now.Add(time.Second)), reason, now, now); err != nil {
		t.Fatalf("Release of the entry at the limit: %v", err)
	}
	if err := ob.Dead(t.Context(), take(now.Add(2*time.Second)), reason, now, now.Add(24*time.Hour)); err != nil {
		t.Fatalf("Dead of the entry at the limit: %v", err)
	}
}

// A pass of a hundred entries, in fifty lanes of two, is leased in one
// transaction and marked dispatched in one: no UpdateItem per entry, each
// lane's entries in order, the second of a lane never without its first.
func TestOutboxLeasesAndMarksInBulk(t *testing.T) {
	s, _, c := outboxStore(t)
	now := time.Now()
	msgs := make([]outbox.Message, 0, 100)
	for i := range 50 {
		for range 2 {
			msgs = append(msgs, outbox.Message{Destination: "q", OrderingKey: "o-" + strconv.Itoa(i), Body: []byte("b")})
		}
	}
	for i := 0; i < len(msgs); i += 10 {
		l := claimAt(t, s, "test#bulk"+strconv.Itoa(i), now)
		if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs[i : i+10]}); err != nil {
			t.Fatal(err)
		}
	}
	ob := s.Outbox()
	c.reset()
	got, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r1", Now: now, LeaseUntil: now.Add(time.Minute), Max: 100})
	if err != nil || len(got) != 100 {
		t.Fatalf("lease: %d entries, %v; want 100", len(got), err)
	}
	if n := c.get("UpdateItem"); n != 0 {
		t.Errorf("lease: %d UpdateItem calls; want the entries taken in a transaction", n)
	}
	if n := c.get("TransactWriteItems"); n != 1 {
		t.Errorf("lease: %d TransactWriteItems calls; want 1", n)
	}
	seen := map[string]int64{}
	leases := make([]outbox.Lease, len(got))
	for i, e := range got {
		if last, ok := seen[e.OrderingKey]; ok && last >= e.Seq {
			t.Errorf("lane %s: entry seq %d after seq %d", e.OrderingKey, e.Seq, last)
		}
		seen[e.OrderingKey] = e.Seq
		leases[i] = e.Lease
	}
	c.reset()
	if err := ob.Dispatched(t.Context(), leases, now, now.Add(time.Hour)); err != nil {
		t.Fatalf("dispatched: %v", err)
	}
	if u, tx := c.get("UpdateItem"), c.get("TransactWriteItems"); u != 0 || tx != 1 {
		t.Errorf("dispatched: %d UpdateItem and %d TransactWriteItems calls; want one transaction", u, tx)
	}
	if sent, err := ob.Entries(t.Context(), outbox.Dispatched, 0); err != nil || len(sent) != 100 {
		t.Errorf("dispatched entries: %d, %v; want 100", len(sent), err)
	}
}

// A transaction of marks refused for one lost lease marks the others one
// by one: only the lost one is ErrLeaseLost.
func TestOutboxBulkMarkLostLeaseIsItsOwn(t *testing.T) {
	s, _, _ := outboxStore(t)
	now := time.Now()
	msgs := make([]outbox.Message, 5)
	for i := range msgs {
		msgs[i] = outbox.Message{Destination: "q", OrderingKey: "k" + strconv.Itoa(i), Body: []byte("b")}
	}
	l := claimAt(t, s, "test#bulklost", now)
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil {
		t.Fatal(err)
	}
	ob := s.Outbox()
	got, err := ob.Lease(t.Context(), outbox.LeaseRequest{Owner: "r1", Now: now, LeaseUntil: now.Add(time.Second), Max: 5})
	if err != nil || len(got) != 5 {
		t.Fatalf("lease: %d entries, %v", len(got), err)
	}
	// Another relay takes the first entry over once its lease ends.
	later := now.Add(2 * time.Second)
	taken, err := s.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r2", Now: later, LeaseUntil: later.Add(time.Minute), Max: 1})
	if err != nil || len(taken) != 1 {
		t.Fatalf("takeover: %d entries, %v", len(taken), err)
	}
	leases := make([]outbox.Lease, len(got))
	for i, e := range got {
		leases[i] = e.Lease
	}
	err = ob.Dispatched(t.Context(), leases, later, later.Add(time.Hour))
	if !errors.Is(err, outbox.ErrLeaseLost) {
		t.Fatalf("dispatched: %v; want ErrLeaseLost for the entry taken over", err)
	}
	if sent, err := ob.Entries(t.Context(), outbox.Dispatched, 0); err != nil || len(sent) != 4 {
		t.Errorf("dispatched entries: %d, %v; want the 4 still held", len(sent), err)
	}
}
