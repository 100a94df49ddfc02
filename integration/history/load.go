// Package history checks the histories storehistory records: every key's
// store calls against a model of the idempotency record (absent, then
// PENDING under a lease, then COMPLETED, FAILED or DEAD_LETTER, each
// transition fenced by the lease's owner and version, a claim taking only
// an absent or expired record), for linearizability with porcupine, one
// key at a time; and the acks beside them for the anomalies Jepsen names:
// lost, duplicated, acked before committed, committed by a fenced owner.
//
// A call that returned an error leaving its effect open, or that never
// returned (its process was killed), may have taken effect at any time
// after it began, or never.
package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/onceq/onceq/examples/storehistory"
)

// ErrMalformed is returned for a history line that is not an event.
var ErrMalformed = errors.New("history: malformed event")

// op is one store call: its call, its return when it returned, and the
// times of both (ret is math.MaxInt64 when its outcome is unknown).
type op struct {
	process   int
	in        storehistory.Event
	out       storehistory.Event
	returned  bool
	call, ret int64
}

// unknown reports whether op may or may not have taken effect.
func (o *op) unknown() bool { return !o.returned || o.out.Outcome == storehistory.OutcomeUnknown }

// ok reports whether op surely succeeded.
func (o *op) ok() bool { return o.returned && o.out.Outcome == storehistory.OutcomeOK }

// keyHistory is one key's ops and settled messages, and how many times
// its message's business effect was applied when that was counted.
type keyHistory struct {
	ops     []*op
	settles []storehistory.Event
	effects int
	counted bool
}

// History is the events of one or more processes, by key.
type History struct {
	keys      map[string]*keyHistory
	processes int
}

// New returns an empty History.
func New() *History { return &History{keys: map[string]*keyHistory{}} }

// LoadFiles reads the histories of paths, each one process's.
func LoadFiles(paths ...string) (*History, error) {
	h := New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		err = h.Add(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
	}
	return h, nil
}

func (h *History) key(k string) *keyHistory {
	kh := h.keys[k]
	if kh == nil {
		kh = &keyHistory{}
		h.keys[k] = kh
	}
	return kh
}

// Add reads one process's history. A last line cut short (the process was
// killed while writing it) is dropped; any other line that is not an
// event is an error.
func (h *History) Add(r io.Reader) error {
	proc := h.processes
	h.processes++
	calls := map[int64]*op{}
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			break // a line without its newline was never finished
		}
		if err != nil {
			return err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		var e storehistory.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrMalformed, n, err)
		}
		switch e.Kind {
		case storehistory.KindCall:
			o := &op{process: proc, in: e, call: e.Time, ret: math.MaxInt64}
			calls[e.ID] = o
			kh := h.key(e.Key)
			kh.ops = append(kh.ops, o)
		case storehistory.KindReturn:
			o := calls[e.ID]
			if o == nil || o.returned {
				return fmt.Errorf("%w: line %d: a return of call %d, which is not open", ErrMalformed, n, e.ID)
			}
			o.out, o.returned = e, true
			if e.Outcome != storehistory.OutcomeUnknown {
				o.ret = e.Time
			}
		case storehistory.KindSettle:
			kh := h.key(e.Key)
			kh.settles = append(kh.settles, e)
		default:
			return fmt.Errorf("%w: line %d: kind %q", ErrMalformed, n, e.Kind)
		}
	}
	return nil
}

// AddEffects adds n to the times the business effect of key's message
// was applied, as read from what the handlers wrote once the run is over
// (a counter each commit adds one to, a row per commit). Check counts a
// key whose effect was applied more than once as duplicated, and an acked
// key whose effect was counted and never applied as lost, whatever its
// store calls say: a commit whose outcome was unknown may be taken by the
// model as never applied, and only its effect shows that it was. Call it
// with n = 0 for a key whose effect was looked for and not found. Count
// one message's effects: a key sent again past its record's retention is
// a new message.
func (h *History) AddEffects(key string, n int) {
	kh := h.key(key)
	kh.effects += n
	kh.counted = true
}

// Keys returns the keys the history holds, in no particular order.
func (h *History) Keys() []string {
	keys := make([]string, 0, len(h.keys))
	for k := range h.keys {
		keys = append(keys, k)
	}
	return keys
}
