package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/onceq/onceq/dedup"
)

// failReasons: any reason a handler's error can carry lands, so that a
// failed run is always counted: a NUL (which a PostgreSQL text column
// refuses), invalid UTF-8 (a multi-byte character cut by bytes), a reason
// far past the limit. Get returns it valid, bounded and NUL-free.
func (s *suite) failReasons(t *testing.T, st dedup.Store) {
	cases := map[string]string{
		"nul":         "boom\x00after",
		"invalid":     "cut \xe2\x82 in two, and \xff",
		"64KiB":       strings.Repeat("é", 32<<10),
		"64KiB-ascii": strings.Repeat("x", 64<<10),
	}
	for name, reason := range cases {
		t.Run(name, func(t *testing.T) {
			k := key(t)
			l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
			if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: reason, Now: at(1), RetryAt: at(5)}); err != nil {
				t.Fatalf("Fail with a %s reason: %v", name, err)
			}
			r := get(t, st, k)
			if r.Status != dedup.StatusFailed || r.Attempts != 1 {
				t.Fatalf("record after Fail %s with %d attempts, want FAILED with 1", r.Status, r.Attempts)
			}
			checkReason(t, r.LastError)
			if !strings.HasPrefix(reason, r.LastError[:min(len(r.LastError), 4)]) {
				t.Fatalf("stored reason %.40q does not start as the reason %.40q", r.LastError, reason)
			}
			// The same reason keeps a dead letter.
			l = mustAcquire(t, claim(t, st, k, "a", "h1", 6, 30), 2)
			if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: reason, Now: at(7), RetryAt: at(100), DeadLetter: true, ResetAttempts: true}); err != nil {
				t.Fatalf("dead-letter Fail with a %s reason: %v", name, err)
			}
			r = mustLose(t, claim(t, st, k, "b", "h1", 8, 38), dedup.StatusDeadLetter)
			checkReason(t, r.LastError)
		})
	}
}

func checkReason(t *testing.T, got string) {
	t.Helper()
	if !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 || len(got) > dedup.MaxReasonSize || got == "" {
		t.Fatalf("stored reason of %d bytes (valid UTF-8 %v) %.60q, want valid UTF-8 without NUL, 1 to %d bytes",
			len(got), utf8.ValidString(got), got, dedup.MaxReasonSize)
	}
}

// nilWrites: a nil business write, a nil interface or a nil of the
// Store's own write types, is refused with a *dedup.NilWriteError before
// anything is written: the lease stays held (the run can still fail or
// retry), and a ClaimComplete leaves the key absent.
func (s *suite) nilWrites(t *testing.T, st dedup.Store) {
	writes := append([]dedup.Write{nil}, s.opts.NilWrites...)
	for i, w := range writes {
		k := key(t)
		l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
		err := st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: []byte("x"), Now: at(1), ExpiresAt: at(3600), Writes: []dedup.Write{w}})
		var ne *dedup.NilWriteError
		if !errors.Is(err, dedup.ErrNilWrite) || !errors.As(err, &ne) || ne.Index != 0 {
			t.Fatalf("Complete with nil write %d (%T): %v, want a *dedup.NilWriteError for write 0", i, w, err)
		}
		if r := get(t, st, k); r.Status != dedup.StatusPending || r.Version != l.Version {
			t.Fatalf("a refused Complete changed the record: %+v", r)
		}
		if err := st.Fail(ctx(t), dedup.FailRequest{Lease: l, Reason: err.Error(), Now: at(2), RetryAt: at(3)}); err != nil {
			t.Fatalf("lease not held after a nil write was refused: %v", err)
		}
		if !st.Capabilities().ClaimComplete {
			continue
		}
		k2 := key(t) + "-cc"
		_, err = st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "a", Response: []byte("x"),
			Now: at(0), ExpiresAt: at(3600), Writes: []dedup.Write{w}})
		if !errors.Is(err, dedup.ErrNilWrite) {
			t.Fatalf("ClaimComplete with nil write %d (%T): %v, want dedup.ErrNilWrite", i, w, err)
		}
		if _, err := st.Get(ctx(t), k2); !errors.Is(err, dedup.ErrNotFound) {
			t.Fatalf("a refused ClaimComplete left a record (Get: %v)", err)
		}
	}
}

// responseLimit: a response up to the Store's MaxResponseSize is kept
// whole; one byte more is refused by Complete and ClaimComplete with a
// *dedup.ResponseTooLargeError, and nothing is committed.
func (s *suite) responseLimit(t *testing.T, st dedup.Store) {
	limit := s.opts.MaxResponseSize
	if limit <= 0 {
		limit = dedup.DefaultMaxResponseSize
	}
	over := bytes.Repeat([]byte{'r'}, limit+1)
	check := func(op string, err error) {
		t.Helper()
		var re *dedup.ResponseTooLargeError
		if !errors.Is(err, dedup.ErrResponseTooLarge) || !errors.As(err, &re) || re.Size != limit+1 || re.Max != limit {
			t.Fatalf("%s of a %d byte response: %v, want a *dedup.ResponseTooLargeError{%d, %d}", op, limit+1, err, limit+1, limit)
		}
	}
	k := key(t)
	l := mustAcquire(t, claim(t, st, k, "a", "h1", 0, 30), 1)
	check("Complete", st.Complete(ctx(t), dedup.CompleteRequest{Lease: l, Response: over, Now: at(1), ExpiresAt: at(3600)}))
	if r := get(t, st, k); r.Status != dedup.StatusPending || r.Version != l.Version || len(r.Response) != 0 {
		t.Fatalf("a refused Complete changed the record: %s version %d, %d response bytes", r.Status, r.Version, len(r.Response))
	}
	if err := complete(t, st, l, string(over[:limit]), 2, 3600); err != nil {
		t.Fatalf("Complete of a response at the limit: %v", err)
	}
	if r := mustLose(t, claim(t, st, k, "b", "h1", 3, 33), dedup.StatusCompleted); len(r.Response) != limit {
		t.Fatalf("duplicate read %d response bytes, want %d", len(r.Response), limit)
	}
	if !st.Capabilities().ClaimComplete {
		return
	}
	k2 := key(t) + "-cc"
	_, err := st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "a", Response: over, Now: at(0), ExpiresAt: at(3600)})
	check("ClaimComplete", err)
	if _, err := st.Get(ctx(t), k2); !errors.Is(err, dedup.ErrNotFound) {
		t.Fatalf("a refused ClaimComplete left a record (Get: %v)", err)
	}
	// Over an expired record too, where the claim takes it over.
	l = mustAcquire(t, claim(t, st, k2, "a", "h1", 0, 10), 1)
	_, err = st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k2, PayloadHash: "h1", Owner: "b", Response: over, Now: at(11), ExpiresAt: at(3600)})
	check("ClaimComplete over an expired lease", err)
	if r := get(t, st, k2); r.Status != dedup.StatusPending || r.Owner != "a" || r.Version != l.Version {
		t.Fatalf("a refused ClaimComplete changed the record: %+v", r)
	}
}
