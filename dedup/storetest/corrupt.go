package storetest

import (
	"errors"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
)

// Corruption is a way a stored record can be one no Store writes.
type Corruption int

// The corruptions Options.Corrupt plants.
const (
	CorruptStatus   Corruption = iota + 1 // a status outside the four
	CorruptAttempts                       // a negative attempt count
	CorruptVersion                        // a negative version
)

func (c Corruption) String() string {
	switch c {
	case CorruptStatus:
		return "UnknownStatus"
	case CorruptAttempts:
		return "NegativeAttempts"
	case CorruptVersion:
		return "NegativeVersion"
	}
	return "Corruption(?)"
}

// corruptRecordRefused: a record no Store writes, found where a claim or a
// read looks, is refused with a *dedup.CorruptRecordError, Permanent, that
// names the key by its hash. Taken as valid, a record in an unknown status
// or with a negative count leaves the consumer waiting on it until it
// expires, or runs the handler on counts it never made.
func (s *suite) corruptRecordRefused(t *testing.T, st dedup.Store) {
	if s.opts.Corrupt == nil {
		t.Skip("the store holds only the records its own calls write: nothing outside it can make one corrupt")
	}
	backing := st
	if w, ok := st.(Wrapped); ok {
		backing = w.Store
	}
	for _, c := range []Corruption{CorruptStatus, CorruptAttempts, CorruptVersion} {
		t.Run(c.String(), func(t *testing.T) {
			k := key(t)
			l := mustAcquire(t, claim(t, st, k, "corrupt-"+k[len(k)-12:], "h1", 0, 3600), 1)
			s.opts.Corrupt(t, backing, l, c)
			_, err := st.Claim(ctx(t), dedup.ClaimRequest{Key: k, PayloadHash: "h1", Owner: "b", Now: at(1), LeaseUntil: at(31)})
			wantCorrupt(t, "Claim", err, k)
			_, err = st.Get(ctx(t), k)
			wantCorrupt(t, "Get", err, k)
			if st.Capabilities().ClaimComplete {
				_, err = st.ClaimComplete(ctx(t), dedup.ClaimCompleteRequest{Key: k, PayloadHash: "h1", Owner: "b",
					Response: []byte("r"), Now: at(2), ExpiresAt: at(7200)})
				wantCorrupt(t, "ClaimComplete", err, k)
			}
		})
	}
}

func wantCorrupt(t *testing.T, what string, err error, k string) {
	t.Helper()
	var ce *dedup.CorruptRecordError
	if !errors.As(err, &ce) || !errors.Is(err, dedup.ErrCorruptRecord) {
		t.Fatalf("%s of a corrupt record: %v (%T), want a *dedup.CorruptRecordError", what, err, err)
	}
	if ce.KeyHash != dedup.KeyHash(k) {
		t.Fatalf("%s: key_hash %q, want the key's %q", what, ce.KeyHash, dedup.KeyHash(k))
	}
	if c := retry.Classify(err); c != retry.Permanent {
		t.Fatalf("%s: %v classified %v, want Permanent", what, err, c)
	}
	if strings.Contains(err.Error(), k) {
		t.Fatalf("%s: the error %q carries the key", what, err)
	}
}
