package dedup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/onceq/onceq/outbox"
)

// Inspector is what an operator's tool reads of a store, beside Get (a
// record by its stored key, which Key, DerivedKey and TenantKey make from
// a message's key): every store hands one over in its Capabilities
// (Capabilities.Inspector), so a tool written against it works on every
// store, and a new store needs no code of its own there. Nothing it does
// writes.
type Inspector interface {
	// Get is Store's: the record of a stored key, or ErrNotFound.
	Get(ctx context.Context, key string) (Record, error)
	// FindKeyHash looks for the records whose key has KeyHash keyHash
	// (12 lowercase hex digits): the key_hash that logs and error texts
	// carry instead of the key. No store indexes that hash, so it reads at
	// most about limit stored records (or names) to find it.
	FindKeyHash(ctx context.Context, keyHash string, limit int) (KeyHashSearch, error)
	// List returns up to f.Limit records that f selects. A selection the
	// store cannot make is an error wrapping ErrCannotList that says why.
	List(ctx context.Context, f ListFilter) ([]Record, error)
	// OutboxEntries returns up to limit outbox entries in state, in the
	// order the relay sends them; a store that keeps no outbox returns an
	// error wrapping ErrNoOutbox.
	OutboxEntries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error)
}

// KeyHashSearch is what Inspector.FindKeyHash found and what it read.
type KeyHashSearch struct {
	// Records are the matching records. Usually one; two only if 48-bit
	// hashes collide. A store that keeps no key (Redis keeps its SHA-256)
	// returns them with Key "".
	Records []Record
	// Scanned counts what was read: Unit names it ("item", "row", "key").
	Scanned int
	Unit    string
	// Exhausted: the search read everything the store holds. When false
	// and Records is empty, the limit stopped it before it could tell.
	Exhausted bool
	// Unmatchable counts what was read whose key is stored only as its
	// SHA-256, so that its key hash cannot be computed: such a record is
	// found by its key. HashedKeys says which keys a store keeps so.
	Unmatchable int
	HashedKeys  string
	// Metered: the store bills reads, and ReadUnits is what the search
	// consumed, as the store reported it.
	Metered   bool
	ReadUnits float64
}

// ListFilter selects the records Inspector.List returns: those with
// Status (any when ""), of Tenant (any when ""; a TenantKey's tenant),
// created at or after Since (any when zero), at most Limit of them.
type ListFilter struct {
	Status Status
	Tenant string
	Since  time.Time
	Limit  int
}

var (
	// ErrCannotList: a listing the store cannot make (by tenant, of a
	// store that keeps no key, for one).
	ErrCannotList = errors.New("dedup: the store cannot make this listing")
	// ErrNoOutbox: outbox entries asked of a store that keeps no outbox.
	ErrNoOutbox = errors.New("dedup: the store keeps no outbox")
)

// Selects says whether the filter selects r, but for its Limit: for a
// store that filters records as it reads them.
func (f ListFilter) Selects(r Record) bool {
	if f.Status != "" && r.Status != f.Status {
		return false
	}
	if !f.Since.IsZero() && r.CreatedAt.Before(f.Since) {
		return false
	}
	if f.Tenant != "" {
		p, err := TenantPrefix(f.Tenant)
		return err == nil && strings.HasPrefix(r.Key, p)
	}
	return true
}

// TenantPrefix is how every stored key of tenant begins (see TenantKey).
func TenantPrefix(tenant string) (string, error) {
	t, err := EscapeTenant(tenant)
	if err != nil {
		return "", err
	}
	return t + string(Separator) + TenantMark, nil
}

// Validate says what is wrong with f, or nil: a Limit below 1, a status
// no record has, a tenant TenantKey refuses.
func (f ListFilter) Validate() error {
	if f.Limit < 1 {
		return fmt.Errorf("dedup: list: limit %d, want at least 1", f.Limit)
	}
	switch f.Status {
	case "", StatusPending, StatusCompleted, StatusFailed, StatusDeadLetter:
	default:
		return fmt.Errorf("dedup: list: status %q, want %s, %s, %s or %s", f.Status, StatusPending, StatusCompleted, StatusFailed, StatusDeadLetter)
	}
	if f.Tenant != "" {
		if _, err := EscapeTenant(f.Tenant); err != nil {
			return fmt.Errorf("dedup: list: %w", err)
		}
	}
	return nil
}

// Forgetter is what an operator's tool writes to a store: every store
// implements it, as it does Inspector, so that the tool works on every
// store.
type Forgetter interface {
	// Forget deletes the record of a stored key if its Version is still
	// version, the one the operator saw: a record moved on since (claimed,
	// completed, failed) is kept, and the error wraps ErrRecordChanged. An
	// absent record is ErrNotFound. A forgotten key is absent: its next
	// message runs its handler as a new one.
	Forget(ctx context.Context, key string, version int64) error
}
