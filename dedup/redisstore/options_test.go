package redisstore_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/retry"
)

// wantOptionError fails t unless err is New's refusal of option.
func wantOptionError(t *testing.T, err error, option string) {
	t.Helper()
	var oe *redisstore.OptionError
	if !errors.As(err, &oe) || oe.Option != option || !errors.Is(err, redisstore.ErrInvalidConfig) ||
		retry.Classify(err) != retry.Misconfigured || !strings.Contains(err.Error(), option) {
		t.Fatalf("%v, want an *OptionError naming %s", err, option)
	}
}

// A Grace of zero or less lets Redis delete a lease its holder still
// counts as live (its clock a second behind the claimer's, within the skew
// margin): a second worker would claim the key the first one holds. New
// refuses it.
func TestGraceMustBePositive(t *testing.T) {
	c := client(t, nil)
	for _, g := range []time.Duration{0, -time.Minute} {
		s, err := redisstore.New(c, redisstore.Prefix(prefix()), redisstore.Grace(g))
		if err == nil {
			claimsLiveLease(t, s, g, time.Second)
		}
		wantOptionError(t, err, "Grace")
	}
}

// A Grace no longer than a claim's skew margin lets Redis delete a lease
// the claimer still counts as held: the claim is refused.
func TestGraceOverSkewMargin(t *testing.T) {
	c := client(t, nil)
	const grace = time.Second
	s := open(t, c, redisstore.Prefix(prefix()), redisstore.Grace(grace))
	now := time.Now()
	_, err := s.Claim(testCtx(t), dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: grace})
	if err == nil {
		claimsLiveLease(t, s, grace, 3*time.Second)
	}
	wantOptionError(t, err, "Grace")
	if !strings.Contains(err.Error(), "skew margin") {
		t.Fatalf("%v: does not say the skew margin is the trouble", err)
	}
	// A margin under Grace claims as ever.
	if cl, err := s.Claim(testCtx(t), dedup.ClaimRequest{Key: "k", Owner: "a", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: grace / 2}); err != nil || !cl.Acquired {
		t.Fatalf("claim under Grace: %+v %v", cl, err)
	}
}

// claimsLiveLease fails t when s lets a second worker claim a lease that
// its holder, whose clock runs behind by lag, still counts as live: with
// the claimer's skew margin of 5 seconds the store counts it held, and
// Redis must not have deleted it.
func claimsLiveLease(t *testing.T, s *redisstore.Store, grace, lag time.Duration) {
	t.Helper()
	ctx := testCtx(t)
	const margin = 5 * time.Second
	holder := time.Now().Add(-lag)
	// The holder's lease runs half a second more by its own clock.
	if cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "held", Owner: "a", Now: holder, LeaseUntil: holder.Add(lag / 2), SkewMargin: margin}); err != nil || !cl.Acquired {
		t.Fatalf("Grace(%v): first claim: %+v %v", grace, cl, err)
	}
	now := time.Now()
	cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "held", Owner: "b", Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: margin})
	if err == nil && cl.Acquired {
		t.Fatalf("Grace(%v) was accepted, and a second worker claimed the lease its holder counts as live", grace)
	}
	t.Fatalf("Grace(%v) was accepted (second claim: %+v %v)", grace, cl, err)
}

// A Prefix with a hash tag ("{…}") would make it, not the record's own
// tag, what Redis Cluster hashes: every record in one slot. New refuses a
// prefix with '{'.
func TestPrefixWithoutHashTag(t *testing.T) {
	c := client(t, nil)
	for _, p := range []string{"app{1}:", "{onceq}:" + prefix(), prefix() + "{"} {
		s, err := redisstore.New(c, redisstore.Prefix(p))
		if err == nil {
			oneSlot(t, c, s, p)
		}
		wantOptionError(t, err, "Prefix")
	}
	// '}' alone starts no tag.
	open(t, c, redisstore.Prefix(prefix()+"}"))
}

// oneSlot fails t, as s was built with prefix p, and says how many hash
// tags Redis Cluster finds in two of its records' keys: one when p holds a
// tag, so that both share a slot.
func oneSlot(t *testing.T, c *redis.Client, s *redisstore.Store, p string) {
	t.Helper()
	ctx := testCtx(t)
	now := time.Now()
	tags := map[string]bool{}
	for _, k := range []string{"a", "b"} {
		if _, err := s.Claim(ctx, dedup.ClaimRequest{Key: k, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	names, err := c.Keys(ctx, strings.NewReplacer("[", `\[`, "*", `\*`, "?", `\?`).Replace(p)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(ctx, names...) })
	for _, n := range names {
		tags[hashTag(n)] = true
	}
	t.Fatalf("Prefix(%q) was accepted: records %q, hashed by Redis Cluster as %d distinct tags", p, names, len(tags))
}

// hashTag is what Redis Cluster hashes of a key: the text between the
// first '{' and the first '}' after it, when not empty; else the key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
