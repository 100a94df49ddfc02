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

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/examples/storehistory"
)

// ErrMalformed is returned for a history line that is not an event.
var ErrMalformed = errors.New("history: malformed event")

// op is one store call (or, in batch mode, one call on an offset row):
// its call, its return when it returned, and the
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

// operation is op as porcupine takes it.
func (o *op) operation() porcupine.Operation {
	return porcupine.Operation{ClientId: o.process, Input: o.in, Output: o.out, Call: o.call, Return: o.ret}
}

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
	if err := loadFiles(h.Add, paths); err != nil {
		return nil, err
	}
	return h, nil
}

// loadFiles hands each of paths to add, naming the file in add's error.
func loadFiles(add func(io.Reader) error, paths []string) error {
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		err = add(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", filepath.Base(p), err)
		}
	}
	return nil
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
	return readEvents(r, func(n int, e storehistory.Event) error {
		switch e.Kind {
		case storehistory.KindCall:
			kh := h.key(e.Key)
			kh.ops = append(kh.ops, openCall(calls, proc, e))
		case storehistory.KindReturn:
			return closeCall(calls, n, e)
		case storehistory.KindSettle:
			kh := h.key(e.Key)
			kh.settles = append(kh.settles, e)
		default:
			return fmt.Errorf("%w: line %d: kind %q", ErrMalformed, n, e.Kind)
		}
		return nil
	})
}

// readEvents calls fn with each event of r and its line number, stopping
// at fn's first error. Blank lines are skipped, and a last line without
// its newline is dropped: the process was killed while writing it. Any
// other line that is not an event is ErrMalformed.
func readEvents(r io.Reader, fn func(n int, e storehistory.Event) error) error {
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil // a line without its newline was never finished
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
		if err := fn(n, e); err != nil {
			return err
		}
	}
}

// openCall records process's call e as an op open in calls and returns it.
func openCall(calls map[int64]*op, process int, e storehistory.Event) *op {
	o := &op{process: process, in: e, call: e.Time, ret: math.MaxInt64}
	calls[e.ID] = o
	return o
}

// closeCall records the return e, on line n, of its call open in calls.
// A return whose outcome is unknown leaves the call's end open.
func closeCall(calls map[int64]*op, n int, e storehistory.Event) error {
	o := calls[e.ID]
	if o == nil || o.returned {
		return fmt.Errorf("%w: line %d: a return of call %d, which is not open", ErrMalformed, n, e.ID)
	}
	o.out, o.returned = e, true
	if e.Outcome != storehistory.OutcomeUnknown {
		o.ret = e.Time
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
