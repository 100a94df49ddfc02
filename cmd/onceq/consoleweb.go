package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/cmd/onceq/internal/redrive"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

//go:embed console
var consoleFiles embed.FS

const (
	// listBound bounds what one page reads of the store: a listing goes
	// no further, and says so.
	listBound = 1000
	// responseShown bounds the stored response a page shows.
	responseShown = 4096
	// entriesRead bounds the outbox entries read, per state, to find a
	// record's outgoing ones.
	entriesRead = 1000
	// maxPartitions bounds the offset rows one batch page reads.
	maxPartitions = 256
)

// pages are the console's templates, each the layout with its page's
// content.
var pageNames = []string{"home", "message", "records", "outbox", "batch", "forget", "redrive", "letter"}

func (c *console) templates() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"since": func(t time.Time) string { return short(c.now().Sub(t).Round(time.Second)) },
		"when":  func(t time.Time) string { return relative(t, c.now()) },
		"rfc":   func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"hash":  dedup.KeyHash,
		"live":  func(t time.Time) bool { return !c.now().After(t) },
	}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(consoleFiles, "console/layout.html")
	if err != nil {
		return nil, err
	}
	ts := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.Must(base.Clone()).ParseFS(consoleFiles, "console/"+name+".html")
		if err != nil {
			return nil, err
		}
		ts[name] = t
	}
	return ts, nil
}

// view is what every page shows besides its content.
type view struct {
	Title   string
	Tab     string
	Where   string
	Actions bool
	Redrive bool
	// Letters: a message's dead letter can be redriven.
	Letters bool
	Token   string
	Error   string
	Notice  string
	Tenants bool
	Data    any
}

func (c *console) handler() http.Handler {
	ts, err := c.templates()
	if err != nil {
		// The templates are embedded: a failure is a build's, found by
		// every test.
		panic(err)
	}
	static, _ := fs.Sub(consoleFiles, "console")
	mux := http.NewServeMux()
	render := func(w http.ResponseWriter, r *http.Request, name string, v view, status int) {
		v.Where, v.Actions, v.Redrive, v.Token, v.Tenants = c.ins.where, c.forget != nil, c.redrive != nil, c.token, c.cfg.tenants
		v.Letters = c.letters != nil
		var b bytes.Buffer
		if err := ts[name].ExecuteTemplate(&b, "layout.html", v); err != nil {
			c.log.ErrorContext(r.Context(), "console: page", "page", name, "error", err)
			http.Error(w, "the page could not be made", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(b.Bytes())
	}
	page := func(name string, f func(r *http.Request) view) {
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, r *http.Request) {
			v := f(r)
			render(w, r, name, v, http.StatusOK)
		})
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		render(w, r, "home", view{Title: "onceq console", Tab: "home", Data: c.cfg.namespace}, http.StatusOK)
	})
	page("message", c.message)
	page("records", c.records)
	page("outbox", c.outboxPage)
	page("batch", c.batchPage)
	mux.HandleFunc("GET /forget", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.confirmForget(r)
		render(w, r, "forget", v, status)
	})
	mux.HandleFunc("POST /forget", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.doForget(r)
		render(w, r, "forget", v, status)
	})
	mux.HandleFunc("GET /redrive", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.confirmRedrive(r)
		render(w, r, "redrive", v, status)
	})
	mux.HandleFunc("POST /redrive", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.doRedrive(r)
		render(w, r, "redrive", v, status)
	})
	mux.HandleFunc("GET /redrive-letter", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.confirmLetter(r)
		render(w, r, "letter", v, status)
	})
	mux.HandleFunc("POST /redrive-letter", func(w http.ResponseWriter, r *http.Request) {
		v, status := c.doLetter(r)
		render(w, r, "letter", v, status)
	})
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	// A form posted from another site is refused, by the browser's own
	// word (Sec-Fetch-Site) or its Origin, before the token is looked at.
	return c.guard(http.NewCrossOriginProtection().Handler(mux))
}

// guard answers only requests addressed to this console by a name a
// DNS rebinding cannot borrow (an IP address, localhost, the name -addr
// gave), and forbids the pages being framed, run as script, or cached.
func (c *console) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		if host != "localhost" && (c.host == "" || host != c.host) && net.ParseIP(strings.Trim(host, "[]")) == nil {
			http.Error(w, "the console answers requests for an IP address, localhost or the name -addr gives only", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// story is one record as the message page shows it.
type story struct {
	Record    dedup.Record
	KeyHash   string
	Response  string
	Shown     int // bytes of the response shown
	Escaped   bool
	Entries   []outbox.Entry
	Dead      int // of Entries, DEAD
	NoOutbox  bool
	EntriesOf string // what was read to find Entries
}

// messageData is the message page: the form, and the stories found.
type messageData struct {
	Key, Namespace, Tenant, KeyHash string
	Stored, Asked                   bool
	Stories                         []story
	Searched                        string
	// Absent is the stored key looked up and not found: its dead letter
	// may still be redriven.
	Absent string
}

func (c *console) message(r *http.Request) view {
	q := r.URL.Query()
	d := messageData{Key: q.Get("key"), Namespace: cmp.Or(q.Get("ns"), c.cfg.namespace), Tenant: q.Get("tenant"),
		KeyHash: strings.ToLower(strings.TrimSpace(q.Get("key_hash"))), Stored: q.Get("stored") != ""}
	v := view{Title: "a message's story", Tab: "message", Data: &d}
	if sk := q.Get("stored_key"); sk != "" {
		d.Key, d.Stored = sk, true
	}
	if d.Key == "" && d.KeyHash == "" {
		return v
	}
	d.Asked = true
	ctx := r.Context()
	var recs []dedup.Record
	if d.KeyHash != "" {
		if len(d.KeyHash) != len(dedup.KeyHash("k")) || strings.Trim(d.KeyHash, "0123456789abcdef") != "" {
			v.Error = fmt.Sprintf("key_hash %q: a key_hash is 12 hex digits, as logs print it", d.KeyHash)
			return v
		}
		res, err := c.ins.FindKeyHash(ctx, d.KeyHash, c.cfg.scanLimit)
		if err != nil {
			v.Error = err.Error()
			return v
		}
		d.Searched = fmt.Sprintf("read %s of %s", plural(res.Scanned, res.Unit), c.ins.where)
		if !res.Exhausted && len(res.Records) == 0 {
			d.Searched += fmt.Sprintf(", not all of it (-scan-limit %d)", c.cfg.scanLimit)
		}
		if res.Unmatchable > 0 {
			d.Searched += fmt.Sprintf("; %d of them keep their key as a hash (%s) and are found by key only", res.Unmatchable, res.HashedKeys)
		}
		recs = res.Records
	} else {
		key, err := c.storedKey(d)
		if err != nil {
			v.Error = err.Error()
			return v
		}
		rec, err := c.ins.Get(ctx, key)
		switch {
		case errors.Is(err, dedup.ErrNotFound):
			d.Searched = "no record of key_hash " + dedup.KeyHash(key) + " in " + c.ins.where
			d.Absent = key
		case err != nil:
			v.Error = err.Error()
			return v
		default:
			recs = []dedup.Record{rec}
		}
	}
	for _, rec := range recs {
		d.Stories = append(d.Stories, c.story(ctx, rec, d.KeyHash))
	}
	if q.Get("forgotten") != "" {
		v.Notice = "The record was forgotten: the key's next message runs as a new one."
	}
	return v
}

// storedKey is the stored key the form names, as the consumer makes it.
func (c *console) storedKey(d messageData) (string, error) {
	key := d.Key
	if !d.Stored {
		k, err := dedup.Key(d.Namespace, key)
		if err != nil {
			return "", fmt.Errorf("key: %w", err)
		}
		key = k
	}
	if d.Tenant != "" {
		k, err := dedup.TenantKey(d.Tenant, key)
		if err != nil {
			return "", fmt.Errorf("tenant: %w", err)
		}
		key = k
	}
	return key, nil
}

func (c *console) story(ctx context.Context, rec dedup.Record, keyHash string) story {
	s := story{Record: rec, KeyHash: keyHash}
	if rec.Key != "" {
		s.KeyHash = dedup.KeyHash(rec.Key)
	} else if rec.KeyHash != "" {
		s.KeyHash = rec.KeyHash
	}
	resp := rec.Response
	s.Shown = min(len(resp), responseShown)
	s.Response = string(resp[:s.Shown])
	if !printable(s.Response) {
		s.Response, s.Escaped = escape(s.Response), true
	}
	if rec.Key == "" {
		return s
	}
	prefix := outbox.ID(rec.Key, 0)
	prefix = prefix[:len(prefix)-1]
	read := 0
	for _, st := range []outbox.State{outbox.Pending, outbox.Dead, outbox.Dispatched} {
		es, err := c.ins.OutboxEntries(ctx, st, entriesRead)
		if errors.Is(err, dedup.ErrNoOutbox) {
			s.NoOutbox = true
			return s
		}
		if err != nil {
			s.EntriesOf = "the outbox could not be read: " + err.Error()
			return s
		}
		read += len(es)
		for _, e := range es {
			if rest, ok := strings.CutPrefix(e.ID, prefix); ok && digits(rest) {
				s.Entries = append(s.Entries, e)
				if e.State == outbox.Dead {
					s.Dead++
				}
			}
		}
	}
	s.EntriesOf = fmt.Sprintf("among the first %d entries of each state (%d read)", entriesRead, read)
	return s
}

func digits(s string) bool { return s != "" && strings.Trim(s, "0123456789") == "" }

// recordsData is a listing of records: a page of them, and for failures
// their reasons counted.
type recordsData struct {
	Status           dedup.Status
	Tenant, Reason   string
	Records          []dedup.Record
	Reasons          []reasonCount
	Read             int
	More             bool
	Page             int
	Prev, Next       string
	Since            string
	Bound, PageStart int
}

type reasonCount struct {
	Reason string
	Count  int
	Link   string
}

func (c *console) records(r *http.Request) view {
	q := r.URL.Query()
	d := recordsData{Status: dedup.Status(cmp.Or(q.Get("status"), string(dedup.StatusPending))), Tenant: q.Get("tenant"),
		Reason: q.Get("reason"), Page: pageOf(q), Since: short(c.cfg.since), Bound: listBound}
	v := view{Title: map[dedup.Status]string{dedup.StatusPending: "in flight", dedup.StatusDeadLetter: "dead letters",
		dedup.StatusFailed: "failed", dedup.StatusCompleted: "completed"}[d.Status], Tab: string(d.Status), Data: &d}
	if v.Title == "" {
		v.Error = fmt.Sprintf("status %q: want PENDING, FAILED, DEAD_LETTER or COMPLETED", d.Status)
		return v
	}
	limit := min((d.Page+1)*c.cfg.pageSize, listBound)
	if d.Reason != "" || d.Status == dedup.StatusFailed || d.Status == dedup.StatusDeadLetter {
		// Reasons are counted over all that a page may read.
		limit = listBound
	}
	recs, err := c.ins.List(r.Context(), dedup.ListFilter{Status: d.Status, Tenant: d.Tenant, Since: c.now().Add(-c.cfg.since), Limit: limit + 1})
	if err != nil {
		v.Error = err.Error()
		return v
	}
	d.More = len(recs) > limit
	recs = recs[:min(len(recs), limit)]
	d.Read = len(recs)
	if d.Status != dedup.StatusPending && d.Status != dedup.StatusCompleted {
		counts := map[string]int{}
		for _, rec := range recs {
			counts[rec.LastError]++
		}
		for reason, n := range counts {
			l := url.Values{"status": {string(d.Status)}, "reason": {reason}, "tenant": {d.Tenant}}
			if reason == "" {
				l.Set("reason", noReason)
			}
			d.Reasons = append(d.Reasons, reasonCount{Reason: reason, Count: n, Link: "/records?" + l.Encode()})
		}
		slices.SortFunc(d.Reasons, func(a, b reasonCount) int { return cmp.Or(b.Count-a.Count, strings.Compare(a.Reason, b.Reason)) })
	}
	if d.Reason != "" {
		want := d.Reason
		if want == noReason {
			want = ""
		}
		recs = slices.DeleteFunc(recs, func(rec dedup.Record) bool { return rec.LastError != want })
	}
	d.PageStart = d.Page * c.cfg.pageSize
	d.Records = window(recs, d.PageStart, c.cfg.pageSize)
	d.Prev, d.Next = pageLinks(r.URL, d.Page, d.PageStart+c.cfg.pageSize < len(recs))
	return v
}

// noReason stands, in a link, for the records that keep none.
const noReason = "(none)"

// window is the page of xs from start, at most n long.
func window[T any](xs []T, start, n int) []T {
	if start >= len(xs) {
		return nil
	}
	return xs[start:min(len(xs), start+n)]
}

func pageOf(q url.Values) int {
	p, err := strconv.Atoi(q.Get("page"))
	if err != nil || p < 0 {
		return 0
	}
	return min(p, listBound)
}

// pageLinks are the links to the page before and after page ("" where
// there is none).
func pageLinks(u *url.URL, page int, more bool) (prev, next string) {
	at := func(p int) string {
		q := u.Query()
		q.Set("page", strconv.Itoa(p))
		return u.Path + "?" + q.Encode()
	}
	if page > 0 {
		prev = at(page - 1)
	}
	if more {
		next = at(page + 1)
	}
	return prev, next
}

// outboxData is the outbox: its lanes' backlog, and a page of entries.
type outboxData struct {
	State      outbox.State
	NoOutbox   bool
	Lanes      []lane
	Entries    []outbox.Entry
	Read       int
	More       bool
	Page       int
	Prev, Next string
	Bound      int
}

// lane is one Destination and OrderingKey's backlog.
type lane struct {
	Destination, OrderingKey string
	Count, MaxAttempts       int
	Oldest                   time.Time
	LastError                string
}

func (c *console) outboxPage(r *http.Request) view {
	q := r.URL.Query()
	d := outboxData{State: outbox.State(cmp.Or(q.Get("state"), string(outbox.Pending))), Page: pageOf(q), Bound: listBound}
	v := view{Title: "outbox", Tab: "outbox", Data: &d}
	if !slices.Contains([]outbox.State{outbox.Pending, outbox.Dead, outbox.Dispatched}, d.State) {
		v.Error = fmt.Sprintf("state %q: want PENDING, DEAD or DISPATCHED", d.State)
		return v
	}
	limit := listBound
	if d.State != outbox.Pending {
		limit = min((d.Page+1)*c.cfg.pageSize, listBound)
	}
	es, err := c.ins.OutboxEntries(r.Context(), d.State, limit+1)
	if errors.Is(err, dedup.ErrNoOutbox) {
		d.NoOutbox = true
		return v
	}
	if err != nil {
		v.Error = err.Error()
		return v
	}
	d.More = len(es) > limit
	es = es[:min(len(es), limit)]
	d.Read = len(es)
	if d.State == outbox.Pending {
		byLane := map[[2]string]*lane{}
		for _, e := range es {
			k := [2]string{e.Destination, e.OrderingKey}
			l := byLane[k]
			if l == nil {
				l = &lane{Destination: e.Destination, OrderingKey: e.OrderingKey, Oldest: e.CreatedAt}
				byLane[k] = l
			}
			l.Count++
			if e.CreatedAt.Before(l.Oldest) {
				l.Oldest = e.CreatedAt
			}
			if e.Attempts >= l.MaxAttempts && e.LastError != "" {
				l.LastError = e.LastError
			}
			l.MaxAttempts = max(l.MaxAttempts, e.Attempts)
		}
		for _, l := range byLane {
			d.Lanes = append(d.Lanes, *l)
		}
		slices.SortFunc(d.Lanes, func(a, b lane) int {
			return cmp.Or(b.Count-a.Count, a.Oldest.Compare(b.Oldest), strings.Compare(a.Destination, b.Destination), strings.Compare(a.OrderingKey, b.OrderingKey))
		})
	}
	start := d.Page * c.cfg.pageSize
	d.Entries = window(es, start, c.cfg.pageSize)
	d.Prev, d.Next = pageLinks(r.URL, d.Page, start+c.cfg.pageSize < len(es))
	return v
}

// batchData is batch mode's stored offsets of a group's topic.
type batchData struct {
	Group, Topic string
	Partitions   int
	None         bool
	Rows         []offsetRow
}

type offsetRow struct {
	Partition int32
	Found     bool
	Lease     batch.Lease
	Error     string
}

func (c *console) batchPage(r *http.Request) view {
	q := r.URL.Query()
	d := batchData{Group: q.Get("group"), Topic: q.Get("topic"), None: c.offsets == nil}
	v := view{Title: "batch offsets", Tab: "batch", Data: &d}
	n, err := strconv.Atoi(cmp.Or(q.Get("partitions"), "1"))
	if err != nil || n < 1 || n > maxPartitions {
		v.Error = fmt.Sprintf("partitions %q: want 1 to %d", q.Get("partitions"), maxPartitions)
		return v
	}
	d.Partitions = n
	if d.None || d.Group == "" || d.Topic == "" {
		return v
	}
	for p := range int32(n) {
		row := offsetRow{Partition: p}
		l, err := c.offsets.Offset(r.Context(), batch.Partition{Group: d.Group, Topic: d.Topic, Partition: p})
		switch {
		case errors.Is(err, batch.ErrNotFound):
		case err != nil:
			row.Error = err.Error()
		default:
			row.Found, row.Lease = true, l
		}
		d.Rows = append(d.Rows, row)
	}
	return v
}

// forgetData is the forget page: the record to confirm, or what became
// of it.
type forgetData struct {
	Record  dedup.Record
	KeyHash string
	Done    bool
	Back    string
}

func (c *console) confirmForget(r *http.Request) (view, int) {
	d := forgetData{}
	v := view{Title: "forget a record", Tab: "message", Data: &d}
	if c.forget == nil {
		v.Error = "this console is read-only: start it with -actions to forget records"
		return v, http.StatusForbidden
	}
	key := r.URL.Query().Get("stored_key")
	d.Back = "/message?" + url.Values{"stored_key": {key}}.Encode()
	rec, err := c.ins.Get(r.Context(), key)
	if err != nil {
		v.Error = err.Error()
		return v, http.StatusNotFound
	}
	d.Record, d.KeyHash = rec, dedup.KeyHash(key)
	return v, http.StatusOK
}

func (c *console) doForget(r *http.Request) (view, int) {
	d := forgetData{}
	v := view{Title: "forget a record", Tab: "message", Data: &d}
	if c.forget == nil {
		v.Error = "this console is read-only: start it with -actions to forget records"
		return v, http.StatusForbidden
	}
	if !c.tokenOK(r) {
		v.Error = badToken
		return v, http.StatusForbidden
	}
	key := r.PostFormValue("stored_key")
	d.Back = "/message?" + url.Values{"stored_key": {key}}.Encode()
	d.KeyHash = dedup.KeyHash(key)
	version, err := strconv.ParseInt(r.PostFormValue("version"), 10, 64)
	if err != nil || key == "" {
		v.Error = "the form names no record and version"
		return v, http.StatusBadRequest
	}
	err = c.forget.Forget(r.Context(), key, version)
	switch {
	case errors.Is(err, dedup.ErrRecordChanged):
		v.Error = fmt.Sprintf("the record changed since version %d was shown: it was kept; look at it again", version)
		return v, http.StatusConflict
	case errors.Is(err, dedup.ErrNotFound):
		v.Error = "there is no record to forget: it expired or was forgotten already"
		return v, http.StatusNotFound
	case err != nil:
		v.Error = err.Error()
		return v, http.StatusInternalServerError
	}
	c.log.InfoContext(r.Context(), "console: record forgotten", "key_hash", d.KeyHash, "version", version, "where", c.ins.where)
	d.Done = true
	return v, http.StatusOK
}

const badToken = "the form's token is not this console's: reload the record's page and confirm again"

// tokenOK: the form carries this console's token.
func (c *console) tokenOK(r *http.Request) bool {
	return subtle.ConstantTimeCompare([]byte(r.PostFormValue("token")), []byte(c.token)) == 1
}

// redriveData is the redrive page: a message's DEAD entries to confirm,
// or what the redrive did.
type redriveData struct {
	Story  story
	Key    string
	Report string
	// NoRecord: the store holds no record of the key.
	NoRecord bool
	Done     bool
	Back     string
}

const noRedrive = "this console does not redrive: start it with -actions, over a store that keeps an outbox"

func (c *console) confirmRedrive(r *http.Request) (view, int) {
	d := redriveData{Key: r.URL.Query().Get("stored_key")}
	v := view{Title: "redrive DEAD outbox entries", Tab: "message", Data: &d}
	d.Back = "/message?" + url.Values{"stored_key": {d.Key}}.Encode()
	if c.redrive == nil {
		v.Error = noRedrive
		return v, http.StatusForbidden
	}
	rec, absent, msg, status := c.toConfirm(r, d.Key)
	if msg != "" {
		v.Error = msg
		return v, status
	}
	if absent {
		// Entries outlive their record (it expired, or was forgotten):
		// they are found by the key, as the run finds them by its hash.
		d.NoRecord, rec = true, dedup.Record{Key: d.Key}
	}
	d.Story = c.story(r.Context(), rec, "")
	return v, http.StatusOK
}

// toConfirm reads the record of key for an action's confirmation page.
// No record (absent) is no refusal: a message's dead letters and outbox
// entries outlive its record, and the action's form runs for such a key
// too. It returns why the page refuses, with its status, or "".
func (c *console) toConfirm(r *http.Request, key string) (rec dedup.Record, absent bool, msg string, status int) {
	if key == "" {
		return rec, false, "the link names no key", http.StatusBadRequest
	}
	rec, err := c.ins.Get(r.Context(), key)
	switch {
	case errors.Is(err, dedup.ErrNotFound):
		return dedup.Record{}, true, "", 0
	case err != nil:
		return dedup.Record{}, false, err.Error(), http.StatusInternalServerError
	}
	return rec, false, "", 0
}

func (c *console) doRedrive(r *http.Request) (view, int) {
	d := redriveData{Key: r.PostFormValue("stored_key")}
	v := view{Title: "redrive DEAD outbox entries", Tab: "message", Data: &d}
	d.Back = "/message?" + url.Values{"stored_key": {d.Key}}.Encode()
	if msg, status := c.refused(r, c.redrive != nil, noRedrive, d.Key); msg != "" {
		v.Error = msg
		return v, status
	}
	rep, err := c.redrive(r.Context(), dedup.KeyHash(d.Key))
	d.Report, d.Done = rep.String(), true
	if err != nil {
		v.Error = "the redrive stopped: " + err.Error()
		return v, http.StatusInternalServerError
	}
	return v, http.StatusOK
}

// refused says why a redrive posted with r, for the message of key, is
// refused, with its status: the action is off (enabled false: off says
// how to turn it on), the form's token is wrong, or it names no key. A
// key with no record is not refused: its letters and entries outlive it,
// and its confirmation page says what the run does to them. It returns
// "" when the redrive may go on.
func (c *console) refused(r *http.Request, enabled bool, off, key string) (string, int) {
	switch {
	case !enabled:
		return off, http.StatusForbidden
	case !c.tokenOK(r):
		return badToken, http.StatusForbidden
	case key == "":
		return "the form names no key", http.StatusBadRequest
	}
	return "", 0
}

// letterData is the page that redrives a message's dead letter: its
// record to confirm, or what the redrive did.
type letterData struct {
	Record  dedup.Record
	Key     string
	KeyHash string
	From    string
	Report  string
	// Outcome says in words what became of the message's letters.
	Outcome []string
	// NoRecord: the store holds no record of the key.
	NoRecord bool
	Done     bool
	Back     string
}

const noLetters = "this console does not redrive dead letters: start it with -actions and -sqs-dlq or -kafka-dlt"

func (c *console) confirmLetter(r *http.Request) (view, int) {
	d := letterData{Key: r.URL.Query().Get("stored_key")}
	v := view{Title: "redrive a dead letter", Tab: "message", Data: &d}
	d.Back, d.KeyHash = "/message?"+url.Values{"stored_key": {d.Key}}.Encode(), dedup.KeyHash(d.Key)
	if c.letters == nil {
		v.Error = noLetters
		return v, http.StatusForbidden
	}
	d.From = c.letters.from
	if msg := c.letters.refuses(d.Key); msg != "" {
		v.Error = msg
		return v, http.StatusForbidden
	}
	var msg string
	var status int
	// A letter outlives its record (expired, forgotten, or never made):
	// the run moves it, with no record to reset, as onceq redrive does;
	// the page says so before.
	d.Record, d.NoRecord, msg, status = c.toConfirm(r, d.Key)
	if msg != "" {
		v.Error = msg
		return v, status
	}
	return v, http.StatusOK
}

func (c *console) doLetter(r *http.Request) (view, int) {
	d := letterData{Key: r.PostFormValue("stored_key")}
	v := view{Title: "redrive a dead letter", Tab: "message", Data: &d}
	d.Back, d.KeyHash = "/message?"+url.Values{"stored_key": {d.Key}}.Encode(), dedup.KeyHash(d.Key)
	if msg, status := c.refused(r, c.letters != nil, noLetters, d.Key); msg != "" {
		v.Error = msg
		return v, status
	}
	d.From = c.letters.from
	if msg := c.letters.refuses(d.Key); msg != "" {
		v.Error = msg
		return v, http.StatusForbidden
	}
	_, err := c.ins.Get(r.Context(), d.Key)
	d.NoRecord = errors.Is(err, dedup.ErrNotFound)
	rep, err := c.letters.run(r.Context(), d.KeyHash)
	d.Report, d.Done, d.Outcome = rep.String(), true, letterOutcome(rep, d.From, d.NoRecord)
	if err != nil {
		v.Error = "the redrive stopped: " + err.Error()
		return v, http.StatusInternalServerError
	}
	c.log.InfoContext(r.Context(), "console: dead letters redriven", "key_hash", d.KeyHash, "from", d.From, "moved", rep.Moved, "completed", rep.Completed)
	return v, http.StatusOK
}

// letterOutcome says what a redrive of one message's letters did;
// noRecord: the store held no record of it.
func letterOutcome(rep redrive.Report, from string, noRecord bool) []string {
	var out []string
	switch {
	case rep.Moved > 0 && noRecord:
		out = append(out, fmt.Sprintf("%d dead letter(s) sent back to the source, with no record to reset: the message runs as a new one.", rep.Moved))
	case rep.Moved > 0:
		out = append(out, fmt.Sprintf("%d dead letter(s) sent back to the source, the record reset first: the message runs again.", rep.Moved))
	}
	if rep.Completed > 0 {
		out = append(out, fmt.Sprintf("%d dead letter(s) NOT sent back: the record is COMPLETED, its effect committed, and running it again would do it twice. The letter stays in %s.", rep.Completed, from))
	}
	if rep.Held > 0 {
		out = append(out, fmt.Sprintf("%d dead letter(s) left in %s: a worker holds the key now; redrive it once the worker is done.", rep.Held, from))
	}
	if rep.Taken > 0 {
		out = append(out, fmt.Sprintf("%d dead letter(s) moved by another redrive first.", rep.Taken))
	}
	if rep.Seen-rep.Passed == 0 {
		out = append(out, "No dead letter of this message is in "+from+".")
	}
	return out
}
