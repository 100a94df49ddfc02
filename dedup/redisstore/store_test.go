package redisstore_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/cache"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
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

// open is redisstore.New, failing t on a refused option.
func open(t testing.TB, c redis.UniversalClient, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// prefix is a fresh key prefix for one test.
func prefix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "onceqtest:" + hex.EncodeToString(b) + ":"
}

func TestConformance(t *testing.T) {
	c := client(t, nil)
	ps := &prefixes{c: c, of: map[dedup.Store]string{}}
	storetest.Run(t, func(t *testing.T) dedup.Store {
		p := prefix()
		s := open(t, c, redisstore.Prefix(p), redisstore.MaxResponseSize(testMaxResponse))
		if err := s.Check(testCtx(t)); err != nil {
			t.Fatalf("Check: %v", err)
		}
		return ps.add(s, p)
	}, storetest.Options{Corrupt: ps.corrupt, MaxResponseSize: testMaxResponse})
}

// testMaxResponse is the conformance run's response limit, other than the
// default (which the run behind the cache keeps).
const testMaxResponse = 100 << 10

// The suite again through the COMPLETED cache the consumer puts in
// front of every store.
func TestConformanceBehindCache(t *testing.T) {
	c := client(t, nil)
	ps := &prefixes{c: c, of: map[dedup.Store]string{}}
	storetest.Run(t, func(t *testing.T) dedup.Store {
		p := prefix()
		return ps.add(cache.Wrap(open(t, c, redisstore.Prefix(p)), 100, 0), p)
	},
		storetest.Options{RaceGoroutines: 16, RaceRounds: 20, Corrupt: ps.corrupt})
}

// prefixes are the prefixes of the Stores a conformance run made, for its
// Corrupt hook to find a record's Redis key.
type prefixes struct {
	c  *redis.Client
	mu sync.Mutex
	of map[dedup.Store]string
}

func (ps *prefixes) add(s dedup.Store, p string) dedup.Store {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.of[s] = p
	return s
}

// corrupt rewrites the record of l in its one encoding (see record.go),
// corrupt in the way how.
func (ps *prefixes) corrupt(t *testing.T, st dedup.Store, l dedup.Lease, how storetest.Corruption) {
	ps.mu.Lock()
	p, ok := ps.of[st]
	ps.mu.Unlock()
	if !ok {
		t.Fatalf("no prefix for %T", st)
	}
	rk := redisKeyOf(p, l.Key)
	v, err := ps.c.Get(testCtx(t), rk).Result()
	if err != nil {
		t.Fatal(err)
	}
	ver := strconv.FormatInt(l.Version, 10)
	head := "1P" + ver + ":" + strconv.Itoa(len(l.Owner)) + ":" + l.Owner
	if !strings.HasPrefix(v, head) {
		t.Fatalf("record %q does not start with its head %q", v, head)
	}
	switch how {
	case storetest.CorruptStatus:
		v = "1X" + v[2:]
	case storetest.CorruptVersion:
		v = "1P-" + v[2:]
	case storetest.CorruptAttempts:
		// After the head: expires ":" attempts ":" …
		rest := v[len(head):]
		i := strings.IndexByte(rest, ':') + 1
		j := i + strings.IndexByte(rest[i:], ':')
		v = head + rest[:i] + "-1" + rest[j:]
	default:
		t.Fatalf("no way to plant %v", how)
	}
	if err := ps.c.Set(testCtx(t), rk, v, redis.KeepTTL).Err(); err != nil {
		t.Fatal(err)
	}
}

// Keys are opaque: any bytes, any length, each its own record, under one
// hash-tagged Redis key of fixed size.
func TestKeysAnyBytesAnyLength(t *testing.T) {
	c := client(t, nil)
	p := prefix()
	s := open(t, c, redisstore.Prefix(p))
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
	s := open(t, c, redisstore.Prefix(p), redisstore.Grace(time.Minute))
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
	s := open(t, client(t, nil), redisstore.Prefix(prefix()))
	now := time.Now()
	_, err := s.ClaimComplete(testCtx(t), dedup.ClaimCompleteRequest{Key: "k", Owner: "o", Now: now, ExpiresAt: now.Add(time.Hour), Writes: []dedup.Write{foreignWrite("x")}})
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
	s := open(t, client(t, &redis.Options{Username: user, Password: "any"}), redisstore.Prefix(prefix()))
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
	s := open(t, c)
	now := time.Now()
	_, err = s.Claim(testCtx(t), dedup.ClaimRequest{Key: secretKey, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	wantClass(t, "Claim", err, retry.Transient)
	wantClass(t, "Check", s.Check(testCtx(t)), retry.Transient)
}

// WithWait on a server without replicas: the write is applied, and the
// caller told it reached none (Transient).
func TestWaitWithoutReplicas(t *testing.T) {
	s := open(t, client(t, nil), redisstore.Prefix(prefix()), redisstore.WithWait(1, 10*time.Millisecond))
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

// commandHook records the names of the commands a client sends (but those
// that set up a connection) and, once, runs before ahead of the first
// command named at.
type commandHook struct {
	mu     sync.Mutex
	names  []string
	at     string
	before func()
}

func (h *commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		if n := cmd.Name(); n != "hello" && n != "client" {
			h.names = append(h.names, n)
		}
		var f func()
		if cmd.Name() == h.at {
			f, h.before = h.before, nil
		}
		h.mu.Unlock()
		if f != nil {
			f()
		}
		return next(ctx, cmd)
	}
}

func (h *commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the names recorded since the last take.
func (h *commandHook) take() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := strings.Join(h.names, " ")
	h.names = nil
	return s
}

// redisKeyOf is the documented Redis key of a record.
func redisKeyOf(p, key string) string {
	sum := sha256.Sum256([]byte(key))
	return p + "{" + hex.EncodeToString(sum[:]) + "}"
}

// A new key's claim is one SET (no script); a duplicate's reads the
// record with a GET. Only a takeover and the lease's own writes run a
// script.
func TestCallsPerClaim(t *testing.T) {
	h := &commandHook{}
	c := client(t, nil)
	c.AddHook(h)
	s := open(t, c, redisstore.Prefix(prefix()))
	ctx := testCtx(t)
	now := time.Now()
	claim := func(owner string, at time.Duration) dedup.Claim {
		t.Helper()
		cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: owner, PayloadHash: "h", Now: now.Add(at), LeaseUntil: now.Add(at + time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	if cl := claim("a", 0); !cl.Acquired || cl.Lease.Version != 1 {
		t.Fatalf("new key: %+v", cl)
	}
	if got := h.take(); got != "set" {
		t.Fatalf("a new key's claim sent %q, want one set", got)
	}
	if cl := claim("b", 0); cl.Acquired || cl.Existing.Owner != "a" || cl.Existing.PayloadHash != "h" {
		t.Fatalf("duplicate: %+v", cl)
	}
	if got := h.take(); got != "set get" {
		t.Fatalf("a duplicate's claim sent %q, want set and get", got)
	}
	cl := claim("c", 2*time.Second)
	if !cl.Acquired || cl.Lease.Version != 2 || cl.Previous == nil || cl.Previous.Owner != "a" {
		t.Fatalf("takeover: %+v", cl)
	}
	if got := h.take(); got != "set get evalsha" {
		t.Fatalf("a takeover sent %q, want set, get and evalsha", got)
	}
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if got := h.take(); got != "evalsha" {
		t.Fatalf("Complete sent %q, want one evalsha", got)
	}
}

// A takeover writes only over the record it read: one that changed in
// between (another claimer won) answers the claim, and one that Redis
// deleted in between makes the key new again.
func TestTakeoverRaces(t *testing.T) {
	p := prefix()
	other := open(t, client(t, nil), redisstore.Prefix(p))
	ctx := testCtx(t)
	now := time.Now()
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, key string)
		check  func(t *testing.T, cl dedup.Claim)
	}{
		{"another claimer won", func(t *testing.T, key string) {
			cl, err := other.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "winner", Now: now.Add(2 * time.Second), LeaseUntil: now.Add(time.Minute)})
			if err != nil || !cl.Acquired {
				t.Errorf("the other claim: %+v, %v", cl, err)
			}
		}, func(t *testing.T, cl dedup.Claim) {
			if cl.Acquired || cl.Existing.Owner != "winner" || cl.Existing.Version != 2 {
				t.Fatalf("claim after losing the takeover: %+v, want the winner's record", cl)
			}
		}},
		{"the record expired", func(t *testing.T, key string) {
			if err := client(t, nil).Del(ctx, redisKeyOf(p, key)).Err(); err != nil {
				t.Error(err)
			}
		}, func(t *testing.T, cl dedup.Claim) {
			if !cl.Acquired || cl.Lease.Version != 1 || cl.Previous != nil || cl.Attempt != 1 {
				t.Fatalf("claim of a key deleted under the takeover: %+v, want a new key's", cl)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "race-" + strings.ReplaceAll(tc.name, " ", "-")
			h := &commandHook{at: "evalsha"}
			c := client(t, nil)
			c.AddHook(h)
			s := open(t, c, redisstore.Prefix(p))
			if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "a", Now: now, LeaseUntil: now.Add(time.Second)}); err != nil {
				t.Fatal(err)
			}
			h.before = func() { tc.before(t, key) }
			cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: key, Owner: "b", Now: now.Add(2 * time.Second), LeaseUntil: now.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if h.before != nil {
				t.Fatal("the claim ran no takeover script")
			}
			tc.check(t, cl)
		})
	}
}

// A stored value that is no record is Permanent, for the claim (read by
// Go) and for a lease's write (read by the script), without the key.
func TestCorruptRecordPermanent(t *testing.T) {
	wantClass := func(t *testing.T, what string, err error, class retry.Class) {
		t.Helper()
		wantClass(t, what, err, class)
		var ce *dedup.CorruptRecordError
		if !errors.As(err, &ce) || ce.KeyHash != dedup.KeyHash(secretKey) {
			t.Fatalf("%s: %v (%T), want a *dedup.CorruptRecordError for the key", what, err, err)
		}
	}
	c := client(t, nil)
	p := prefix()
	s := open(t, c, redisstore.Prefix(p))
	ctx := testCtx(t)
	now := time.Now()
	if err := c.Set(ctx, redisKeyOf(p, secretKey), "not a record", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Claim(ctx, dedup.ClaimRequest{Key: secretKey, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	wantClass(t, "Claim", err, retry.Permanent)
	_, err = s.Get(ctx, secretKey)
	wantClass(t, "Get", err, retry.Permanent)
	// The lease's head, then a tail no script can read.
	if err := c.Set(ctx, redisKeyOf(p, secretKey), "1P1:1:o-x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	l := dedup.Lease{Key: secretKey, Owner: "o", Version: 1}
	err = s.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour)})
	wantClass(t, "Complete", err, retry.Permanent)
	err = s.Fail(ctx, dedup.FailRequest{Lease: l, Now: now, RetryAt: now.Add(time.Second)})
	wantClass(t, "Fail", err, retry.Permanent)
	err = s.Extend(ctx, dedup.ExtendRequest{Lease: l, Now: now, LeaseUntil: now.Add(time.Minute)})
	wantClass(t, "Extend", err, retry.Permanent)
	// Read up to the hash, whose length runs past the end.
	if err := c.Set(ctx, redisKeyOf(p, secretKey), "1P1:1:o5:0:5:9:h0:", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err = s.Complete(ctx, dedup.CompleteRequest{Lease: l, Now: now, ExpiresAt: now.Add(time.Hour)})
	wantClass(t, "Complete", err, retry.Permanent)
	err = s.Fail(ctx, dedup.FailRequest{Lease: l, Now: now, RetryAt: now.Add(time.Second)})
	wantClass(t, "Fail", err, retry.Permanent)
}

// foreignWrite is a business write of no Store this test runs.
type foreignWrite string

func (foreignWrite) WriteKind() dedup.WriteKind { return "foreign" }
