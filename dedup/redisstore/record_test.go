package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

var sampleRecords = []dedup.Record{
	{Key: "k", Status: dedup.StatusPending, Version: 1, Owner: "o", PayloadHash: "h", CreatedAt: time.UnixMicro(1733000000000001), ExpiresAt: time.UnixMicro(1733000000000002)},
	{Key: "k", Status: dedup.StatusCompleted, Version: 9007199254740991, Owner: "1:2:", PayloadHash: "", Response: []byte("0:\x00\xff1C1:"), Attempts: 3, CreatedAt: time.UnixMicro(-5), ExpiresAt: time.UnixMicro(0)},
	{Key: "k", Status: dedup.StatusFailed, Version: 2, Owner: "", PayloadHash: strings.Repeat("f", 64), LastError: "boom: 12:x", Attempts: 1, CreatedAt: time.UnixMicro(1), ExpiresAt: time.UnixMicro(2)},
	{Key: "k", Status: dedup.StatusDeadLetter, Version: 7, Owner: "w-1#3", Response: []byte("r"), LastError: ":", CreatedAt: time.UnixMicro(10), ExpiresAt: time.UnixMicro(11)},
	{Key: "k", Status: dedup.StatusPending, Version: 4, Owner: "o", PayloadHash: "h", Attempts: 2, Takeovers: 3, CreatedAt: time.UnixMicro(20), ExpiresAt: time.UnixMicro(21)},
	{Key: "k", Status: dedup.StatusCompleted, Version: 5, Owner: "o", Response: []byte("2:"), Takeovers: 1, CreatedAt: time.UnixMicro(20), ExpiresAt: time.UnixMicro(22)},
}

// Every field of a record comes back from its stored form.
func TestRecordEncodingRoundTrip(t *testing.T) {
	for i, r := range sampleRecords {
		v, err := encode(&r)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		got, err := decode("k", string(v))
		if err != nil {
			t.Fatalf("record %d: decode %q: %v", i, v, err)
		}
		if !reflect.DeepEqual(*got, r) {
			t.Fatalf("record %d: decoded\n%+v\nwant\n%+v", i, *got, r)
		}
	}
	if _, err := encode(&dedup.Record{Status: "ARCHIVED"}); !errors.Is(err, errUnknownStatus) {
		t.Fatalf("unknown status encoded: %v", err)
	}
}

// A value that is not a record's one encoding is a corrupt record
// (Permanent), naming the field and not the key.
func TestRecordDecodeRefuses(t *testing.T) {
	for v, field := range map[string]string{
		"":                         "layout",
		"3P1:1:o1:0:1:1:h0:":       "layout",
		"2P1:1:o1:0:0:1:1:h0:":     "takeovers", // layout 2 counts some
		"2P1:1:o1:0:01:1:1:h0:":    "takeovers",
		"2P1:1:o1:0:1:h0:":         "created",
		"1X1:1:o1:0:1:1:h0:":       "status",
		"1P01:1:o1:0:1:1:h0:":      "version",
		"1P+1:1:o1:0:1:1:h0:":      "version",
		"1P1:2:o":                  "owner",
		"1P1:1:o-0:0:1:1:h0:":      "expires",
		"1P1:1:o1:0:1:2:h":         "payload hash",
		"1P1:1:o1:0:1:1:h0":        "last error",
		"1P1:1:o1:0:1:1:h1:":       "last error",
		"1P1:1:o1:0:1:-1:h0:":      "payload hash",
		"1P1:1:o1:0:1":             "created",
		"1P9223372036854775808:0:": "version",
	} {
		_, err := decode("secret-key", v)
		if err == nil || retry.Classify(err) != retry.Permanent || !strings.HasSuffix(err.Error(), "field "+field) {
			t.Errorf("decode %q: %v, want a Permanent error naming field %s", v, err, field)
		}
		if err != nil && strings.Contains(err.Error(), "secret-key") {
			t.Errorf("decode %q: the error names the key: %v", v, err)
		}
	}
}

// decode accepts only what encode writes: whatever it reads encodes back
// to the same bytes, so two stored values never mean one record.
func FuzzRecordDecode(f *testing.F) {
	for _, r := range sampleRecords {
		v, _ := encode(&r)
		f.Add(string(v))
	}
	f.Add("1P1:1:o1:0:1:1:h0:")
	f.Add("2P1:1:o1:0:2:1:1:h0:")
	f.Fuzz(func(t *testing.T, v string) {
		r, err := decode("k", v)
		if err != nil {
			return
		}
		back, err := encode(r)
		if err != nil || string(back) != v {
			t.Fatalf("decode(%q) = %+v encodes to %q, %v", v, *r, back, err)
		}
	})
}

// The scripts write records in the same one encoding: after each
// Complete, Fail and Extend the stored string is what encode writes for
// the record it decodes to.
func TestScriptsWriteTheEncoding(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	s, err := New(c, Prefix("onceqtest:"+hex.EncodeToString(b)+":"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t.Cleanup(func() { _ = c.Del(context.Background(), s.redisKey("k")).Err() })
	now := time.UnixMicro(time.Now().UnixMicro()) // as stored: whole microseconds
	stored := func(what string, want func(r *dedup.Record) bool) {
		t.Helper()
		v, err := c.Get(ctx, s.redisKey("k")).Result()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		r, err := decode("k", v)
		if err != nil {
			t.Fatalf("%s: stored %q: %v", what, v, err)
		}
		if back, _ := encode(r); string(back) != v || !want(r) {
			t.Fatalf("%s: stored %q, decoded %+v, encoded back %q", what, v, *r, back)
		}
	}
	claim := func(at time.Duration) dedup.Lease {
		t.Helper()
		cl, err := s.Claim(ctx, dedup.ClaimRequest{Key: "k", Owner: "own:1:", PayloadHash: "h:2", Now: now.Add(at), LeaseUntil: now.Add(at + time.Second)})
		if err != nil || !cl.Acquired {
			t.Fatalf("claim at %v: %+v, %v", at, cl, err)
		}
		return cl.Lease
	}
	l := claim(0)
	stored("claim", func(r *dedup.Record) bool { return r.Status == dedup.StatusPending && r.Owner == "own:1:" })
	if err := s.Extend(ctx, dedup.ExtendRequest{Lease: l, Now: now, LeaseUntil: now.Add(9 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	stored("extend", func(r *dedup.Record) bool { return r.ExpiresAt.Equal(now.Add(9 * time.Second)) })
	if err := s.Fail(ctx, dedup.FailRequest{Lease: l, Reason: "12:x\x00", Now: now, RetryAt: now.Add(10 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	stored("fail", func(r *dedup.Record) bool {
		return r.Status == dedup.StatusFailed && r.Attempts == 1 && r.LastError == "12:x\uFFFD" && r.PayloadHash == "h:2" && r.Version == 2
	})
	l = claim(11 * time.Second)
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("7:r\xff"), Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stored("complete", func(r *dedup.Record) bool {
		return r.Status == dedup.StatusCompleted && r.Attempts == 1 && r.LastError == "" && string(r.Response) == "7:r\xff" && r.Version == 4 &&
			r.CreatedAt.Equal(now.Add(11*time.Second))
	})
	// Takeovers: the layout that counts them, kept by Extend, Fail and
	// Complete, and left by a Fail that resets them.
	claim(2 * time.Hour)
	l = claim(2*time.Hour + 2*time.Second) // the lease before was abandoned
	stored("takeover", func(r *dedup.Record) bool { return r.Takeovers == 1 && r.Version == 6 && r.Attempts == 0 })
	if err := s.Extend(ctx, dedup.ExtendRequest{Lease: l, Now: now, LeaseUntil: now.Add(3 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stored("extend with takeovers", func(r *dedup.Record) bool { return r.Takeovers == 1 && r.ExpiresAt.Equal(now.Add(3*time.Hour)) })
	if err := s.Fail(ctx, dedup.FailRequest{Lease: l, Reason: "1:", Now: now, RetryAt: now.Add(3*time.Hour + time.Second)}); err != nil {
		t.Fatal(err)
	}
	stored("fail with takeovers", func(r *dedup.Record) bool { return r.Takeovers == 1 && r.Attempts == 1 && r.LastError == "1:" })
	l = claim(3*time.Hour + 2*time.Second)
	if err := s.Complete(ctx, dedup.CompleteRequest{Lease: l, Response: []byte("2:"), Now: now, ExpiresAt: now.Add(4 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	stored("complete with takeovers", func(r *dedup.Record) bool {
		return r.Status == dedup.StatusCompleted && r.Takeovers == 1 && r.Attempts == 1 && string(r.Response) == "2:"
	})
	claim(4*time.Hour + time.Second)
	l = claim(4*time.Hour + 3*time.Second)
	if err := s.Fail(ctx, dedup.FailRequest{Lease: l, Reason: "dead", Now: now, RetryAt: now.Add(5 * time.Hour), ResetAttempts: true}); err != nil {
		t.Fatal(err)
	}
	stored("fail that resets", func(r *dedup.Record) bool { return r.Takeovers == 0 && r.Attempts == 0 && r.LastError == "dead" })
}
