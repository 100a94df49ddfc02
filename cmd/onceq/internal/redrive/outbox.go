package redrive

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

// Outbox is the Lot of a store's DEAD outbox entries: each goes back to
// PENDING with its stable ID (outbox.Requeuer), fenced by the version it
// was listed at, so that two runs requeue it once; a relay then sends it,
// and an onceq consumer downstream absorbs a copy that had in fact
// arrived. Its input completed, so no record is read.
//
// The store is read a page at a time (outbox.Pager), each page from
// where the last ended: a run reads it once.
type Outbox struct {
	ob   outbox.Store
	name string
	done bool
	// cursor is the next page's.
	cursor string
}

// NewOutbox returns the Lot of ob's DEAD entries; name says whose outbox
// it is ("table orders"). Each page is the store's own size.
func NewOutbox(ob outbox.Store, name string) (*Outbox, error) {
	if ob == nil {
		return nil, fmt.Errorf("redrive: %s keeps no outbox", name)
	}
	return &Outbox{ob: ob, name: "outbox of " + name}, nil
}

// Next implements Lot: the DEAD entries not looked at yet by this run.
func (o *Outbox) Next(ctx context.Context) ([]*Letter, error) {
	for !o.done {
		es, next, err := o.ob.EntriesPage(ctx, outbox.Dead, o.cursor, 0)
		if err != nil {
			return nil, fmt.Errorf("redrive: listing the DEAD entries of the %s: %w", o.name, err)
		}
		o.cursor, o.done = next, next == ""
		var out []*Letter
		for _, e := range es {
			if e.State != outbox.Dead {
				continue
			}
			out = append(out, o.letter(e))
		}
		if len(out) > 0 {
			return out, nil
		}
	}
	return nil, nil
}

func (o *Outbox) letter(e outbox.Entry) *Letter {
	l := &Letter{ID: "entry " + dedup.KeyHash(e.ID), Reason: e.LastError, At: e.CreatedAt, From: o.name + " (DEAD)",
		To: o.name + " (PENDING), for " + e.Destination, handle: e}
	// The key_hash of the input that sent it: the one its logs carry.
	l.KeyHash = dedup.KeyHash(e.ID)
	if i := strings.LastIndex(e.ID, "#out"); i >= 0 {
		l.KeyHash = dedup.KeyHash(e.ID[:i])
	}
	return l
}

// Move implements Lot: the entry goes back to PENDING.
func (o *Outbox) Move(ctx context.Context, l *Letter) error {
	e := l.handle.(outbox.Entry)
	err := o.ob.Requeue(ctx, e, "requeued by onceq redrive; was DEAD: "+e.LastError, time.Now())
	if errors.Is(err, outbox.ErrEntryChanged) {
		return fmt.Errorf("%w: %s is no longer DEAD at the version listed", ErrTaken, l.ID)
	}
	return err
}

// Settle implements Lot: a requeued entry is off the DEAD list already.
func (o *Outbox) Settle(context.Context, *Letter) error { return nil }

// Pass implements Lot: the entry stays DEAD.
func (o *Outbox) Pass(context.Context, *Letter) error { return nil }

// Close implements Lot.
func (o *Outbox) Close(context.Context) error { return nil }
