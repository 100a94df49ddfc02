package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/onceq/onceq/dedup"
)

// A record is one Redis string, so that a new key is claimed by a plain
// SET NX (no script) and read by a plain GET:
//
//	1 S version ":" len(owner) ":" owner
//	  expires ":" attempts ":" created ":" len(hash) ":" hash
//	  len(last error) ":" last error
//	  response
//
// without the spaces: "1" the layout, S one letter of the status, numbers
// in decimal (times in microseconds since the epoch), strings after their
// length, the response the rest. A record with takeovers has layout "2",
// the count after the attempts:
//
//	2 S … expires ":" attempts ":" takeovers ":" created ":" …
//
// so that a record without (nearly every one) is stored as an earlier
// version stored it, and that version still reads it. The head (after the
// layout) names the status, version and owner alone and ends where the
// owner does, so a script fences a lease by comparing the record's start
// with the head the lease expects. Each record has exactly one encoding
// (decode refuses any other spelling, a layout 2 without takeovers among
// them), and Lua reads the numbers exactly (below 2^53).

const (
	layout          = '1'
	layoutTakeovers = '2'
)

var statusLetters = map[dedup.Status]byte{
	dedup.StatusPending: 'P', dedup.StatusCompleted: 'C', dedup.StatusFailed: 'F', dedup.StatusDeadLetter: 'D',
}

func statusOf(b byte) (dedup.Status, bool) {
	switch b {
	case 'P':
		return dedup.StatusPending, true
	case 'C':
		return dedup.StatusCompleted, true
	case 'F':
		return dedup.StatusFailed, true
	case 'D':
		return dedup.StatusDeadLetter, true
	}
	return "", false
}

// errUnknownStatus: a Store writes only the four statuses.
var errUnknownStatus = errors.New("redisstore: unknown status")

// appendHead appends the head of a record of status st, version and owner
// (the layout byte before it is not part of it).
func appendHead(b []byte, st dedup.Status, version int64, owner string) ([]byte, error) {
	l, ok := statusLetters[st]
	if !ok {
		return nil, fmt.Errorf("%w %q", errUnknownStatus, st)
	}
	b = append(b, l)
	b = strconv.AppendInt(b, version, 10)
	return appendString(append(b, ':'), owner), nil
}

func appendString(b []byte, s string) []byte {
	b = strconv.AppendInt(b, int64(len(s)), 10)
	return append(append(b, ':'), s...)
}

// encode is r's stored form (r.Key is not stored: the Redis key names it).
func encode(r *dedup.Record) ([]byte, error) {
	b := make([]byte, 0, 64+len(r.Owner)+len(r.PayloadHash)+len(r.LastError)+len(r.Response))
	lay := byte(layout)
	if r.Takeovers > 0 {
		lay = layoutTakeovers
	}
	b, err := appendHead(append(b, lay), r.Status, r.Version, r.Owner)
	if err != nil {
		return nil, err
	}
	b = strconv.AppendInt(b, r.ExpiresAt.UnixMicro(), 10)
	b = strconv.AppendInt(append(b, ':'), int64(r.Attempts), 10)
	if r.Takeovers > 0 {
		b = strconv.AppendInt(append(b, ':'), int64(r.Takeovers), 10)
	}
	b = strconv.AppendInt(append(b, ':'), r.CreatedAt.UnixMicro(), 10)
	b = appendString(append(b, ':'), r.PayloadHash)
	b = appendString(b, r.LastError)
	return append(b, r.Response...), nil
}

// decode reads a stored record of key; a value that is not one record's
// encoding is a corrupt record (retry class Permanent).
func decode(key, v string) (*dedup.Record, error) {
	d := decoder{v: v}
	r := &dedup.Record{Key: key}
	takeovers := d.byte(layoutTakeovers)
	if !takeovers && !d.byte(layout) {
		return nil, d.corrupt(key, "layout")
	}
	if len(d.v) > 0 {
		st, ok := statusOf(d.v[0])
		if ok {
			r.Status, d.v = st, d.v[1:]
		} else {
			d.fail("status")
		}
	} else {
		d.fail("status")
	}
	r.Version = d.int("version", ':')
	r.Owner = d.string("owner")
	r.ExpiresAt = time.UnixMicro(d.int("expires", ':'))
	r.Attempts = int(d.int("attempts", ':'))
	if takeovers {
		// Layout 2 is for a record with takeovers only: one encoding.
		if r.Takeovers = int(d.int("takeovers", ':')); r.Takeovers < 1 {
			d.fail("takeovers")
		}
	}
	r.CreatedAt = time.UnixMicro(d.int("created", ':'))
	r.PayloadHash = d.string("payload hash")
	r.LastError = d.string("last error")
	// Versions start at 1 and counts at 0: no Store writes less.
	if r.Version < 1 {
		d.fail("version")
	}
	if r.Attempts < 0 {
		d.fail("attempts")
	}
	if d.bad != "" {
		return nil, d.corrupt(key, d.bad)
	}
	if d.v != "" {
		r.Response = []byte(d.v)
	}
	return r, nil
}

// decoder reads v from its start; the first field it cannot read is bad.
type decoder struct {
	v   string
	bad string
}

func (d *decoder) fail(field string) {
	if d.bad == "" {
		d.bad = field
	}
	d.v = ""
}

func (d *decoder) byte(c byte) bool {
	if len(d.v) == 0 || d.v[0] != c {
		return false
	}
	d.v = d.v[1:]
	return true
}

// int reads a decimal up to end, in its one spelling: no sign but a
// leading "-" on a number other than 0, no leading zero.
func (d *decoder) int(field string, end byte) int64 {
	i := 0
	for i < len(d.v) && d.v[i] != end {
		i++
	}
	s := d.v[:i]
	n, err := strconv.ParseInt(s, 10, 64)
	if i == len(d.v) || err != nil || strconv.FormatInt(n, 10) != s {
		d.fail(field)
		return 0
	}
	d.v = d.v[i+1:]
	return n
}

func (d *decoder) string(field string) string {
	n := d.int(field, ':')
	if n < 0 || n > int64(len(d.v)) {
		d.fail(field)
		return ""
	}
	s := d.v[:n]
	d.v = d.v[n:]
	return s
}

func (d *decoder) corrupt(key, field string) error {
	return &dedup.CorruptRecordError{KeyHash: dedup.KeyHash(key), Err: fmt.Errorf("redisstore: field %s", field)}
}
