package dynamodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamodb"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testenv"
)

func client(t *testing.T) *ddb.Client {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	cfg := testenv.AWSConfig(t, ep)
	return ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
}

func newTable(t *testing.T, c *ddb.Client, opts ...dynamodb.TableOption) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "onceq_test_" + hex.EncodeToString(b)
	if err := dynamodb.CreateTable(context.Background(), c, name, opts...); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return name
}

func TestConformance(t *testing.T) {
	c := client(t)
	table := newTable(t, c)
	// The suite's clock runs an hour ahead of the real one.
	storetest.Run(t, func(t *testing.T) dedup.Store { return newStore(t, c, table, dynamodb.ClockCheck(false)) })
}

func TestConformanceTenantLayout(t *testing.T) {
	c := client(t)
	table := newTable(t, c, dynamodb.TenantLayout())
	storetest.Run(t, func(t *testing.T) dedup.Store {
		return newStore(t, c, table, dynamodb.TenantLayout(), dynamodb.ClockCheck(false))
	},
		storetest.Options{RaceGoroutines: 16, RaceRounds: 20})
}

// A consumer whose key already hashes the body claims with no payload
// hash: both claim shapes must store and return it as empty.
func TestClaimWithoutPayloadHash(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	s := newStore(t, c, newTable(t, c))
	now := time.Now()
	cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "ns#a", Owner: "o1", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatalf("Claim: %+v, %v", cl, err)
	}
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	cc, err := s.ClaimComplete(ctx, dedup.ClaimCompleteRequest{Key: "ns#b", Owner: "o2", Now: now, ExpiresAt: now.Add(time.Hour)})
	if err != nil || !cc.Acquired {
		t.Fatalf("ClaimComplete: %+v, %v", cc, err)
	}
	for _, k := range []string{"ns#a", "ns#b"} {
		r, err := s.Get(ctx, k)
		if err != nil || r.Status != dedup.StatusCompleted || r.PayloadHash != "" {
			t.Fatalf("%s: %+v, %v; want COMPLETED with no payload hash", k, r, err)
		}
	}
}
