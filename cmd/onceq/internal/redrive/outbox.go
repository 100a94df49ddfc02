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
// A store that pages (outbox.Pager, as DynamoDB's does) is read a page at
// a time, each page from where the last ended: a run reads it once. Any
// other is listed again for each batch, past the entries looked at.
type Outbox struct {
	ob    outbox.Store
	rq    outbox.Requeuer
	name  string
	batch int
	seen  map[string]bool
	done  bool
	// cursor is the next page's (outbox.Pager).
	cursor string
}

// NewOutbox returns the Lot of ob's DEAD entries; name says whose outbox
// it is ("table orders"). batch bounds the entries listed at once
// (default 100), but for a store that pages: a page of its own.
func NewOutbox(ob outbox.Store, name string, batch int) (*Outbox, error) {
	if ob == nil {
		return nil, fmt.Errorf("redrive: %s keeps no outbox", name)
	}
	if batch <= 0 {
		batch = 100
	}
	return &Outbox{ob: ob, rq: ob, name: "outbox of " + name, batch: batch, seen: map[string]bool{}}, nil
}

// Next implements Lot: the DEAD entries not looked at yet by this run.
func (o *Outbox) Next(ctx context.Context) ([]*Letter, error) {
	p, pages := o.ob.(outbox.Pager)
	for !o.done {
		var es []outbox.Entry
		var err error
		if pages {
			es, o.cursor, err = p.EntriesPage(ctx, outbox.Dead, o.cursor, 0)
			o.done = err == nil && o.cursor == ""
		} else {
			es, err = o.ob.Entries(ctx, outbox.Dead, o.batch+len(o.seen))
			o.done = len(es) < o.batch+len(o.seen)
		}
		if err != nil {
			return nil, fmt.Errorf("redrive: listing the DEAD entries of the %s: %w", o.name, err)
		}
		var out []*Letter
		for _, e := range es {
			if o.seen[e.ID] || e.State != outbox.Dead {
				continue
			}
			o.seen[e.ID] = true
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
	err := o.rq.Requeue(ctx, e, "requeued by onceq redrive; was DEAD: "+e.LastError, time.Now())
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
