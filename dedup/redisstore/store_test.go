package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testenv"
	"github.com/onceq/onceq/retry"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, o *redis.Options) *redis.Client {
	t.Helper()
	if o == nil {
		o = &redis.Options{}
	}
	o.Addr = testenv.RedisAddr(t)
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// prefix is a fresh key prefix for one test.
func prefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "onceqtest:" + hex.EncodeToString(b) + ":"
}

func TestConformance(t *testing.T) {
	c := client(t, nil)
	storetest.Run(t, func(t *testing.T) dedup.Store {
		s := redisstore.New(c, redisstore.Prefix(prefix()))
		if err := s.Check(testCtx(t)); err != nil {
			t.Fatalf("Check: %v", err)
		}
		return s
	})
}

// The suite again through the COMPLETED cache the consumer puts in
// front of every store.
func TestConformanceBehindCache(t *testing.T) {
	c := client(t, nil)
	storetest.Run(t, func(t *testing.T) dedup.Store {
		return cache.Wrap(redisstore.New(c, redisstore.Prefix(prefix())), 100, 0)
	},
		storetest.Options{RaceGoroutines: 16, RaceRounds: 20})
}

// Keys are opaque: any bytes, any length, each its own record, under one
// hash-tagged Redis key of fixed size.
func TestKeysAnyBytesAnyLength(t *testing.T) {
	c := client(t, nil)
	p := prefix()
	s := redisstore.New(c, redisstore.Prefix(p))
	ctx := testCtx(t)
	long := strings.Repeat("k", 100000)
	keys := []string{"a", "a\x00", "\xff\xfe", long + "1", long + "2", "{tag}"}
	now := time.Now()
	for i, k := range keys {
		cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
		if err != nil || !cl.Acquired {
			t.Fatalf("key %d: %+v, %v", i, cl, err)
		}
		if r, err := s.Get(ctx, k); err != nil || r.Key != k {
			t.Fatalf("key %d: Get %+v, %v", i, r, err)
		}
	}
	names, err := c.Keys(ctx, p+"*").Result()
	if err != nil || len(names) != len(keys) {
		t.Fatalf("redis keys %v, %v", names, err)
	}
	for _, n := range names {
		tag := strings.TrimSuffix(strings.TrimPrefix(n, p+"{"), "}")
		if len(tag) != 64 || strings.ContainsAny(tag, "{}") {
			t.Fatalf("redis key %q is not the prefix and a SHA-256 hash tag", n)
		}
	}
	if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: "", Owner: "o", Now: now, LeaseUntil: now}); !errors.Is(err, dedup.ErrEmptyKey) {
		t.Fatalf("empty key: %v, want ErrEmptyKey", err)
	}
}

// Each write sets the key to expire Grace after the record's expiry.
func TestNativeExpiry(t *testing.T) {
	c := client(t, nil)
	p := prefix()
	s := redisstore.New(c, redisstore.Prefix(p), redisstore.Grace(time.Minute))
	ctx := testCtx(t)
	now := time.Now()
	cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	exp := now.Add(24 * time.Hour)
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: exp}); err != nil {
		t.Fatal(err)
	}
	names, _ := c.Keys(ctx, p+"*").Result()
	if len(names) != 1 {
		t.Fatalf("keys %v", names)
	}
	at, err := c.PExpireTime(ctx, names[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := exp.Add(time.Minute).UnixMilli(); at.Milliseconds() != want {
		t.Fatalf("key expires at %d ms, want %d", at.Milliseconds(), want)
	}
}

func TestWritesUnsupported(t *testing.T) {
	s := redisstore.New(client(t, nil), redisstore.Prefix(prefix()))
	now := time.Now()
	_, err := s.ClaimComplete(testCtx(t), dedup.ClaimCompleteRequest{Key: "k", Owner: "o", Now: now, ExpiresAt: now.Add(time.Hour), Writes: []any{"x"}})
	if !errors.Is(err, dedup.ErrUnsupportedWrite) {
		t.Fatalf("ClaimComplete with writes: %v, want ErrUnsupportedWrite", err)
	}
	if _, err := s.Get(testCtx(t), "k"); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("a refused ClaimComplete wrote: %v", err)
	}
}

const secretKey = "customer-4711@example.com"

func wantClass(t *testing.T, what string, err error, class retry.Class) {
	t.Helper()
	if got := retry.Classify(err); err == nil || got != class {
		t.Fatalf("%s: %v (class %v), want class %v", what, err, got, class)
	}
	if strings.Contains(err.Error(), secretKey) {
		t.Fatalf("%s: error text carries the key: %v", what, err)
	}
}

// A user the ACL denies scripts is a configuration fault, found by Check.
func TestPermissionDeniedMisconfigured(t *testing.T) {
	admin := client(t, nil)
	ctx := testCtx(t)
	user := "onceq_" + strings.Trim(prefix()[10:], ":")
	if err := admin.Do(ctx, "ACL", "SETUSER", user, "on", "nopass", "~*", "-@all", "+ping", "+hgetall").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	// nopass takes any password; go-redis sends AUTH only with one.
	s := redisstore.New(client(t, &redis.Options{Username: user, Password: "any"}), redisstore.Prefix(prefix()))
	wantClass(t, "Check", s.Check(ctx), retry.Misconfigured)
	now := time.Now()
	_, err := s.Claim(ctx, dedup.ClaimRequest{Key: secretKey, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	wantClass(t, "Claim", err, retry.Misconfigured)
}

// A server that does not answer is an outage.
func TestServerDownTransient(t *testing.T) {
	testenv.RedisAddr(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	s := redisstore.New(c)
	now := time.Now()
	_, err = s.Claim(testCtx(t), dedup.ClaimRequest{Key: secretKey, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	wantClass(t, "Claim", err, retry.Transient)
	wantClass(t, "Check", s.Check(testCtx(t)), retry.Transient)
}

// WithWait on a server without replicas: the write is applied, and the
// caller told it reached none (Transient).
func TestWaitWithoutReplicas(t *testing.T) {
	s := redisstore.New(client(t, nil), redisstore.Prefix(prefix()), redisstore.WithWait(1, 10*time.Millisecond))
	now := time.Now()
	_, err := s.Claim(testCtx(t), dedup.ClaimRequest{Key: "k", Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	var re *redisstore.ReplicationError
	if !errors.As(err, &re) || re.Got != 0 || retry.Classify(err) != retry.Transient {
		t.Fatalf("Claim waiting for a replica that is not there: %v", err)
	}
	if r, err := s.Get(testCtx(t), "k"); err != nil || r.Owner != "o" {
		t.Fatalf("the claim was not applied on the primary: %+v, %v", r, err)
	}
}
