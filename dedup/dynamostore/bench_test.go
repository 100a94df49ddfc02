package dynamostore_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/plainbody"
	"github.com/onceq/onceq/internal/testsupport/proccpu"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

const (
	benchWorkers = 32
	benchSKUs    = 256 // spread inventory writes so transactions rarely conflict
	// benchRounds rounds of benchRound each side, sides taking turns.
	benchRounds = 8
	benchRound  = 200 * time.Millisecond
)

// benchSide is one way of doing a mode's job for a fresh key k (and an
// inventory row sku for the modes with a business write).
type benchSide func(ctx context.Context, k, sku string) error

// benchMode is a store mode and the two hand-written requests beside it.
type benchMode struct {
	name string
	// onceq is the store; min the smallest request that does the same
	// job; own onceq's own request shape, written out with the raw SDK.
	onceq, min, own benchSide
}

// sideStats adds up one side's rounds.
type sideStats struct {
	ops     int64
	elapsed time.Duration
	cpu     time.Duration
	calls   int
}

func (s sideStats) rate() float64 { return float64(s.ops) / s.elapsed.Seconds() }

func (s sideStats) cpuPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.cpu) / float64(time.Microsecond) / float64(s.ops)
}

func (s sideStats) callsPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.calls) / float64(s.ops)
}

// BenchmarkDynamoDB measures each store mode beside two hand-written
// versions of it, in one process against one DynamoDB Local, 32 operations
// in flight, SDK retries off on every side:
//
//   - onceq: the store;
//   - min: the smallest request that does the same job (a conditional
//     PutItem "attribute_not_exists(pk) OR expires_at < :now" returning the
//     old item on failure; an UpdateItem conditioned on owner and status to
//     complete it; their TransactWriteItems forms with the business write);
//   - own: the request onceq sends, written out with the raw SDK (a test
//     checks it matches), so the gap to it is the store's client cost.
//
// The sides take turns in rounds of a fixed time (the order rotating),
// after a short warm-up round each. Per side: msgs/s (its ops over its
// rounds' time), client CPU µs per op (the process's CPU time over its
// rounds: DynamoDB Local is another process) and DynamoDB calls per
// message (SDK middleware, every HTTP attempt). Each ratio (vs_min,
// vs_own, cpu_vs_min, cpu_vs_own) is the median of the rounds' own
// ratios, each from sides run back to back, so a machine whose load
// drifts, or one disturbed round, moves it little. One invocation runs its
// rounds whatever b.N is:
//
//	go test -run '^$' -bench '^BenchmarkDynamoDB$' ./dedup/dynamostore/
func BenchmarkDynamoDB(b *testing.B) {
	ep := testenv.DynamoDBEndpoint(b)
	counted := &calls{} // every side's calls, read between rounds
	client := dynamoClient(b, ep, counted)
	// The raw sides' client is the store's: one HTTP attempt per call,
	// bodies without WriteTo (see internal/plainbody).
	raw := ddb.New(client.Options(), func(o *ddb.Options) {
		o.Retryer = aws.NopRetryer{}
		o.HTTPClient = plainbody.Client(o.HTTPClient)
	})
	table := recordsTable(b, client)
	minTable, ownTable := recordsTable(b, client), recordsTable(b, client)
	inv := newInventory(b, client)
	for i := range benchSKUs {
		inv.stock(b, "sku-"+strconv.Itoa(i), 1<<40)
	}
	st := newStore(b, client, table)
	run := uniqueName("")
	var seq atomic.Int64
	next := func() (string, string) {
		n := seq.Add(1)
		return fmt.Sprintf("bench#%s-%d", run, n), "sku-" + strconv.Itoa(int(n%benchSKUs))
	}
	now := time.Now()
	lease, keep := now.Add(time.Minute), now.Add(time.Hour)
	resp := []byte("ok")
	shapes := benchShapes{raw: raw, minTable: minTable, ownTable: ownTable, now: now, lease: lease, keep: keep, resp: resp}

	claimThenComplete := func(ctx context.Context, k string, writes []dedup.Write) error {
		c, err := st.Claim(ctx, dedup.ClaimRequest{Key: k, PayloadHash: "h", Owner: k, Now: now, LeaseUntil: lease})
		if err != nil || !c.Acquired {
			return fmt.Errorf("claim: %+v, %w", c, err)
		}
		return st.Complete(ctx, dedup.CompleteRequest{Lease: c.Lease, Response: resp, Now: now, ExpiresAt: keep, Writes: writes})
	}
	claimComplete := func(ctx context.Context, k string, writes []dedup.Write) error {
		c, err := st.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h", Owner: k, Response: resp, Now: now, ExpiresAt: keep, Writes: writes})
		if err == nil && !c.Acquired {
			err = fmt.Errorf("not acquired: %+v", c)
		}
		return err
	}
	modes := []benchMode{
		{
			name:  "ClaimThenComplete",
			onceq: func(ctx context.Context, k, _ string) error { return claimThenComplete(ctx, k, nil) },
			min: func(ctx context.Context, k, _ string) error {
				if err := shapes.minClaim(ctx, k); err != nil {
					return err
				}
				_, err := raw.UpdateItem(ctx, shapes.minCompleteItem(k))
				return err
			},
			own: func(ctx context.Context, k, _ string) error {
				if err := shapes.ownClaim(ctx, k); err != nil {
					return err
				}
				_, err := raw.UpdateItem(ctx, shapes.ownCompleteItem(k))
				return err
			},
		},
		{
			name:  "ClaimComplete",
			onceq: func(ctx context.Context, k, _ string) error { return claimComplete(ctx, k, nil) },
			min:   func(ctx context.Context, k, _ string) error { return shapes.minClaimComplete(ctx, k) },
			own:   func(ctx context.Context, k, _ string) error { return shapes.ownClaimComplete(ctx, k) },
		},
		{
			name: "ClaimThenCompleteWith1Write",
			onceq: func(ctx context.Context, k, sku string) error {
				return claimThenComplete(ctx, k, []dedup.Write{inv.reserve(sku, 1)})
			},
			min: func(ctx context.Context, k, sku string) error {
				if err := shapes.minClaim(ctx, k); err != nil {
					return err
				}
				return shapes.transact(ctx, transactUpdate(shapes.minCompleteItem(k), types.ReturnValuesOnConditionCheckFailureAllOld), types.TransactWriteItem(inv.reserve(sku, 1)))
			},
			own: func(ctx context.Context, k, sku string) error {
				if err := shapes.ownClaim(ctx, k); err != nil {
					return err
				}
				u := shapes.ownCompleteItem(k)
				return shapes.transact(ctx, transactUpdate(u, u.ReturnValuesOnConditionCheckFailure), types.TransactWriteItem(inv.reserve(sku, 1)))
			},
		},
		{
			name: "ClaimCompleteWith1Write",
			onceq: func(ctx context.Context, k, sku string) error {
				return claimComplete(ctx, k, []dedup.Write{inv.reserve(sku, 1)})
			},
			min: func(ctx context.Context, k, sku string) error {
				return shapes.transact(ctx, shapes.minClaimCompleteTxn(k), types.TransactWriteItem(inv.reserve(sku, 1)))
			},
			own: func(ctx context.Context, k, sku string) error {
				return shapes.transact(ctx, shapes.ownClaimCompleteTxn(k), types.TransactWriteItem(inv.reserve(sku, 1)))
			},
		},
	}

	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			sides := [3]benchSide{m.onceq, m.min, m.own}
			for _, side := range sides { // warm up: connections, caches
				benchRoundOf(b, counted, side, next, benchRound/4)
			}
			var total [3]sideStats
			var rounds [benchRounds][3]sideStats
			for r := range benchRounds {
				for i := range sides {
					s := (r + i) % len(sides)
					got := benchRoundOf(b, counted, sides[s], next, benchRound)
					rounds[r][s] = got
					total[s].ops += got.ops
					total[s].elapsed += got.elapsed
					total[s].cpu += got.cpu
					total[s].calls += got.calls
				}
			}
			// A ratio is the median of its rounds' ratios: each round's
			// sides ran back to back, and one disturbed round moves no
			// median.
			ratio := func(f func(sideStats) float64, a, c int) float64 {
				rs := make([]float64, 0, benchRounds)
				for _, r := range rounds {
					if d := f(r[c]); d > 0 {
						rs = append(rs, f(r[a])/d)
					}
				}
				if len(rs) == 0 {
					return 0
				}
				slices.Sort(rs)
				if n := len(rs); n%2 == 0 {
					return (rs[n/2-1] + rs[n/2]) / 2
				}
				return rs[len(rs)/2]
			}
			const onceq, mn, own = 0, 1, 2
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(total[onceq].rate(), "onceq_msgs/s")
			b.ReportMetric(total[mn].rate(), "min_msgs/s")
			b.ReportMetric(total[own].rate(), "own_msgs/s")
			b.ReportMetric(ratio(sideStats.rate, onceq, mn), "vs_min")
			b.ReportMetric(ratio(sideStats.rate, onceq, own), "vs_own")
			b.ReportMetric(total[onceq].cpuPerOp(), "onceq_cpu-us/op")
			b.ReportMetric(total[mn].cpuPerOp(), "min_cpu-us/op")
			b.ReportMetric(total[own].cpuPerOp(), "own_cpu-us/op")
			if total[mn].cpu > 0 && total[own].cpu > 0 {
				b.ReportMetric(ratio(sideStats.cpuPerOp, onceq, mn), "cpu_vs_min")
				b.ReportMetric(ratio(sideStats.cpuPerOp, onceq, own), "cpu_vs_own")
			}
			b.ReportMetric(total[onceq].callsPerOp(), "calls/msg")
			b.ReportMetric(total[mn].callsPerOp(), "min_calls/msg")
			b.ReportMetric(total[own].callsPerOp(), "own_calls/msg")
		})
	}

	// A duplicate of a COMPLETED record, claimed again: the store alone.
	dupKey := fmt.Sprintf("bench#%s-dup", run)
	if c, err := st.ClaimComplete(b.Context(), dedup.ClaimCompleteRequest{Key: dupKey, PayloadHash: "h", Owner: "o", Response: resp, Now: now, ExpiresAt: keep}); err != nil || !c.Acquired {
		b.Fatal(c, err)
	}
	b.Run("Duplicate", func(b *testing.B) {
		b.SetParallelism((benchWorkers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
		counted.reset()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c, err := st.Claim(b.Context(), dedup.ClaimRequest{Key: dupKey, PayloadHash: "h", Owner: "other", Now: now, LeaseUntil: lease})
				if err != nil || c.Acquired || c.Existing.Status != dedup.StatusCompleted {
					b.Error(c, err)
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		b.ReportMetric(float64(counted.total())/float64(b.N), "calls/msg")
	})
}

// benchRoundOf runs side from benchWorkers goroutines for d, each op on a
// fresh key, and returns what it did.
func benchRoundOf(b *testing.B, counted *calls, side benchSide, next func() (string, string), d time.Duration) sideStats {
	ctx := b.Context()
	var ops atomic.Int64
	var failed atomic.Pointer[error]
	calls0, cpu0, start := counted.total(), proccpu.Used(), time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range benchWorkers {
		wg.Go(func() {
			for time.Now().Before(deadline) && failed.Load() == nil {
				k, sku := next()
				if err := side(ctx, k, sku); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	s := sideStats{ops: ops.Load(), elapsed: time.Since(start), cpu: proccpu.Used() - cpu0, calls: counted.total() - calls0}
	if p := failed.Load(); p != nil {
		b.Fatal(*p)
	}
	return s
}

// benchShapes are the hand-written requests.
type benchShapes struct {
	raw                *ddb.Client
	minTable, ownTable string
	now, lease, keep   time.Time
	resp               []byte
}

func (s *benchShapes) transact(ctx context.Context, items ...types.TransactWriteItem) error {
	_, err := s.raw.TransactWriteItems(ctx, &ddb.TransactWriteItemsInput{TransactItems: items})
	return err
}

func benchS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func benchN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// The minimal shapes: the record is pk, status, owner (to fence the
// completion), expires_at (to take over an abandoned claim) and, once
// COMPLETED, the response.
const (
	minClaimCond    = "attribute_not_exists(pk) OR expires_at < :now"
	minCompleteSet  = "SET #s = :c, expires_at = :exp, #r = :r"
	minCompleteCond = "#o = :o AND #s = :p"
)

var minCompleteNames = map[string]string{"#s": "status", "#o": "owner", "#r": "response"}

func (s *benchShapes) minRecord(k, status string, expires time.Time) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"pk": benchS(k), "status": benchS(status), "owner": benchS(k), "expires_at": benchN(expires.Unix()),
	}
	if status == "COMPLETED" {
		item["response"] = &types.AttributeValueMemberB{Value: s.resp}
	}
	return item
}

func (s *benchShapes) minClaimPut(k, status string, expires time.Time) *ddb.PutItemInput {
	return &ddb.PutItemInput{
		TableName:                           aws.String(s.minTable),
		Item:                                s.minRecord(k, status, expires),
		ConditionExpression:                 aws.String(minClaimCond),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": benchN(s.now.Unix())},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

func (s *benchShapes) minClaim(ctx context.Context, k string) error {
	_, err := s.raw.PutItem(ctx, s.minClaimPut(k, "PENDING", s.lease))
	return err
}

func (s *benchShapes) minClaimComplete(ctx context.Context, k string) error {
	_, err := s.raw.PutItem(ctx, s.minClaimPut(k, "COMPLETED", s.keep))
	return err
}

// transactUpdate is u as a transaction's Update item, returning the old
// item on a condition failure as onFailure says.
func transactUpdate(u *ddb.UpdateItemInput, onFailure types.ReturnValuesOnConditionCheckFailure) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression, ConditionExpression: u.ConditionExpression,
		ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: onFailure,
	}}
}

func (s *benchShapes) minCompleteItem(k string) *ddb.UpdateItemInput {
	return &ddb.UpdateItemInput{
		TableName:                aws.String(s.minTable),
		Key:                      map[string]types.AttributeValue{"pk": benchS(k)},
		UpdateExpression:         aws.String(minCompleteSet),
		ConditionExpression:      aws.String(minCompleteCond),
		ExpressionAttributeNames: minCompleteNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":c": benchS("COMPLETED"), ":p": benchS("PENDING"), ":o": benchS(k),
			":exp": benchN(s.keep.Unix()), ":r": &types.AttributeValueMemberB{Value: s.resp},
		},
	}
}

func (s *benchShapes) minClaimCompleteTxn(k string) types.TransactWriteItem {
	p := s.minClaimPut(k, "COMPLETED", s.keep)
	return types.TransactWriteItem{Put: &types.Put{
		TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression,
		ExpressionAttributeValues:           p.ExpressionAttributeValues,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// onceq's own shapes, as the store writes them for these requests (a new
// key, no skew margin); TestBenchOwnShapes checks they match. A claim is a
// PutItem of the whole record, conditioned on the key being absent.
const (
	ownClaimCond    = "attribute_not_exists(#pk)"
	ownCompleteSet  = "SET #status = :completed, #version = :v1, #expires_at = :exp, #response = :resp REMOVE #lease_expires_at, #error"
	ownCompleteCond = "#owner = :owner AND #version = :v AND #status = :pending"
)

var (
	ownClaimNames    = map[string]string{"#pk": "pk"}
	ownCompleteNames = map[string]string{
		"#status": "status", "#version": "version", "#expires_at": "expires_at", "#response": "response",
		"#lease_expires_at": "lease_expires_at", "#error": "error", "#owner": "owner",
	}
)

func (s *benchShapes) ownRecord(k, status string, expires time.Time) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"pk": benchS(k), "status": benchS(status), "version": benchN(1), "attempts": benchN(0),
		"owner": benchS(k), "payload_hash": benchS("h"), "created_at": benchN(s.now.Unix()), "expires_at": benchN(expires.Unix()),
	}
	if status == "COMPLETED" {
		item["response"] = &types.AttributeValueMemberB{Value: s.resp}
	} else {
		item["lease_expires_at"] = benchN(expires.Unix())
	}
	return item
}

func (s *benchShapes) ownClaimPut(k, status string, expires time.Time) *ddb.PutItemInput {
	return &ddb.PutItemInput{
		TableName:                           aws.String(s.ownTable),
		Item:                                s.ownRecord(k, status, expires),
		ConditionExpression:                 aws.String(ownClaimCond),
		ExpressionAttributeNames:            ownClaimNames,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

func (s *benchShapes) ownClaimItem(k string) *ddb.PutItemInput {
	return s.ownClaimPut(k, "PENDING", s.lease)
}

func (s *benchShapes) ownClaim(ctx context.Context, k string) error {
	_, err := s.raw.PutItem(ctx, s.ownClaimItem(k))
	return err
}

func (s *benchShapes) ownClaimCompleteItem(k string) *ddb.PutItemInput {
	return s.ownClaimPut(k, "COMPLETED", s.keep)
}

func (s *benchShapes) ownClaimComplete(ctx context.Context, k string) error {
	_, err := s.raw.PutItem(ctx, s.ownClaimCompleteItem(k))
	return err
}

func (s *benchShapes) ownClaimCompleteTxn(k string) types.TransactWriteItem {
	p := s.ownClaimCompleteItem(k)
	return types.TransactWriteItem{Put: &types.Put{
		TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression,
		ExpressionAttributeNames:            p.ExpressionAttributeNames,
		ReturnValuesOnConditionCheckFailure: p.ReturnValuesOnConditionCheckFailure,
	}}
}

func (s *benchShapes) ownCompleteItem(k string) *ddb.UpdateItemInput {
	return &ddb.UpdateItemInput{
		TableName:                aws.String(s.ownTable),
		Key:                      map[string]types.AttributeValue{"pk": benchS(k)},
		UpdateExpression:         aws.String(ownCompleteSet),
		ConditionExpression:      aws.String(ownCompleteCond),
		ExpressionAttributeNames: ownCompleteNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":completed": benchS("COMPLETED"), ":v1": benchN(2), ":exp": benchN(s.keep.Unix()),
			":resp": &types.AttributeValueMemberB{Value: s.resp}, ":owner": benchS(k), ":v": benchN(1), ":pending": benchS("PENDING"),
		},
		ReturnValues:                        types.ReturnValueNone,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}
