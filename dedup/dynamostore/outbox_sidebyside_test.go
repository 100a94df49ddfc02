package dynamostore_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
)

// queryGate holds each Query of one index of the outbox table until want
// of them are in flight at once, then lets them all go: calls made one
// after another never get there, and the first one waits out the timeout,
// which marks the gate missed and opens it.
type queryGate struct {
	index   string
	want    int
	timeout time.Duration
	on      atomic.Bool // whether the gate holds queries now

	mu      sync.Mutex
	inside  int // queries held or running now
	most    int // the most there were at once
	open    chan struct{}
	opening sync.Once
	missed  atomic.Bool
}

func newQueryGate(index string, want int) *queryGate {
	return &queryGate{index: index, want: want, timeout: 20 * time.Second, open: make(chan struct{})}
}

func (g *queryGate) middleware(st *middleware.Stack) error {
	return st.Initialize.Add(middleware.InitializeMiddlewareFunc("onceqQueryGate",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			q, ok := in.Parameters.(*ddb.QueryInput)
			if !ok || !g.on.Load() || aws.ToString(q.IndexName) != g.index {
				return next.HandleInitialize(ctx, in)
			}
			g.mu.Lock()
			g.inside++
			g.most = max(g.most, g.inside)
			if g.inside == g.want {
				g.opening.Do(func() { close(g.open) })
			}
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				g.inside--
				g.mu.Unlock()
			}()
			timer := time.NewTimer(g.timeout)
			defer timer.Stop()
			select {
			case <-g.open:
			case <-timer.C:
				g.missed.Store(true)
				g.opening.Do(func() { close(g.open) })
			case <-ctx.Done():
			}
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// check fails t when the gate's queries never were want at once.
func (g *queryGate) check(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.missed.Load() || g.most < g.want {
		t.Fatalf("at most %d queries of the index %s in flight at once, want %d side by side", g.most, g.index, g.want)
	}
}

// gatedOutboxStore is a store on fresh records and outbox tables whose
// client passes its Queries through g.
func gatedOutboxStore(t *testing.T, g *queryGate) *dynamostore.Store {
	t.Helper()
	cfgClient := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	client := ddb.New(cfgClient.Options(), func(o *ddb.Options) { o.APIOptions = append(o.APIOptions, g.middleware) })
	return newStore(t, client, recordsTable(t, client, dynamostore.WithOutbox()))
}

// A pass reads the shards of the pending index side by side: each of
// the shard queries is held until all are in flight.
func TestOutboxLeaseReadsShardsSideBySide(t *testing.T) {
	g := newQueryGate("pending", dynamostore.OutboxShards)
	s := gatedOutboxStore(t, g)
	now := time.Now()
	l := claimAt(t, s, uniqueKey(t), now)
	if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour),
		Outbox: []outbox.Message{{Destination: "q", OrderingKey: "k", Body: []byte("b")}}}); err != nil {
		t.Fatal(err)
	}
	g.on.Store(true)
	got, err := s.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	g.on.Store(false)
	if err != nil || len(got) != 1 || got[0].OrderingKey != "k" {
		t.Fatalf("Lease: %d entries (%v), want the one committed", len(got), err)
	}
	g.check(t)
}

// A pass reads its lanes' entries side by side, a query per lane: each
// lane's query is held until all of them are in flight, and the pass
// still takes every lane's entries, oldest lane first, each lane in order.
func TestOutboxLeaseReadsLanesSideBySide(t *testing.T) {
	const lanes = 6
	g := newQueryGate("lane_pending", lanes)
	s := gatedOutboxStore(t, g)
	now := time.Now()
	var want []string
	for i := range lanes {
		l := claimAt(t, s, uniqueKey(t), now)
		lane := "lane" + strconv.Itoa(i)
		msgs := []outbox.Message{{Destination: "q", OrderingKey: lane, Body: []byte("1")}, {Destination: "q", OrderingKey: lane, Body: []byte("2")}}
		if err := s.Complete(t.Context(), dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour), Outbox: msgs}); err != nil {
			t.Fatal(err)
		}
		want = append(want, lane+"/1", lane+"/2")
	}
	g.on.Store(true)
	got, err := s.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 2 * lanes})
	g.on.Store(false)
	if err != nil {
		t.Fatal(err)
	}
	g.check(t)
	var taken []string
	for _, e := range got {
		taken = append(taken, e.OrderingKey+"/"+string(e.Body))
	}
	if !slices.Equal(taken, want) {
		t.Fatalf("leased %v, want %v", taken, want)
	}
}

// A shard query that fails fails the pass, with an error naming the
// table, and stops the shard queries beside it: they are in flight when
// it fails, and end when their context is cancelled.
func TestOutboxLeaseShardFailureStopsTheOthers(t *testing.T) {
	others := dynamostore.OutboxShards - 1
	var (
		inFlight     = make(chan struct{}, others)
		on           atomic.Bool
		notCancelled atomic.Int32
		allIn        atomic.Bool // the others were in flight when it failed
		refused      = &smithy.GenericAPIError{Code: "ValidationException", Message: "refused by the test"}
	)
	gate := func(st *middleware.Stack) error {
		return st.Initialize.Add(middleware.InitializeMiddlewareFunc("onceqShardFailure",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				q, ok := in.Parameters.(*ddb.QueryInput)
				if !ok || !on.Load() || aws.ToString(q.IndexName) != "pending" {
					return next.HandleInitialize(ctx, in)
				}
				timer := time.NewTimer(20 * time.Second)
				defer timer.Stop()
				if pq, _ := q.ExpressionAttributeValues[":pq"].(*types.AttributeValueMemberS); pq != nil && pq.Value == "p#0" {
					for range others { // fail once the others are in flight
						select {
						case <-inFlight:
						case <-timer.C:
							return middleware.InitializeOutput{}, middleware.Metadata{}, refused
						}
					}
					allIn.Store(true)
					return middleware.InitializeOutput{}, middleware.Metadata{}, refused
				}
				inFlight <- struct{}{}
				select {
				case <-ctx.Done():
					return middleware.InitializeOutput{}, middleware.Metadata{}, ctx.Err()
				case <-timer.C:
					notCancelled.Add(1)
					return next.HandleInitialize(ctx, in)
				}
			}), middleware.After)
	}
	base := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	client := ddb.New(base.Options(), func(o *ddb.Options) { o.APIOptions = append(o.APIOptions, gate) })
	table := recordsTable(t, client, dynamostore.WithOutbox())
	s := newStore(t, client, table)
	now := time.Now()
	on.Store(true)
	got, err := s.Outbox().Lease(t.Context(), outbox.LeaseRequest{Owner: "r", Now: now, LeaseUntil: now.Add(time.Minute), Max: 10})
	on.Store(false)
	var api *smithy.GenericAPIError
	if len(got) != 0 || !errors.As(err, &api) || api.Code != "ValidationException" || !strings.Contains(err.Error(), table) {
		t.Fatalf("Lease: %d entries, %v; want none and the refusal, naming the table %s", len(got), err, table)
	}
	if !allIn.Load() {
		t.Fatalf("the failing shard query was not beside the %d others", others)
	}
	if n := notCancelled.Load(); n != 0 {
		t.Fatalf("%d shard queries ran on after the failure", n)
	}
}
