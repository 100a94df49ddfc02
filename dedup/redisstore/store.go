package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/storeinstr"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// Store is the Redis dedup.Store. It is safe for concurrent use.
type Store struct {
	c      redis.UniversalClient
	prefix string
	grace  time.Duration
	wait   int
	waitT  time.Duration

	takeover, complete, fail, extend *redis.Script
	// maxResponse bounds a stored response (MaxResponseSize).
	maxResponse int
	// instr are the retries, metrics, hooks, logger and spans every store
	// has (package storeinstr); instrCfg is what the options set for New
	// to build them.
	instr    *storeinstr.Instruments
	instrCfg storeinstr.Config
}

var _ dedup.Store = (*Store)(nil)

// Capabilities implements dedup.Store: ClaimComplete works; no business
// writes and no outgoing messages are committed (no Outbox: without
// transactions they could not commit with COMPLETED), and there is no
// batch mode (no Offsets). The Store is its own Inspector.
func (s *Store) Capabilities() dedup.Capabilities {
	return dedup.Capabilities{ClaimComplete: true, Inspector: s, Resetter: s, Forgetter: s}
}

// Attach implements dedup.Store: the Store logs to rt.Logger unless
// WithLogger gave it one (the last non-nil one handed over, when several
// Guards share the Store), and tells every rt.Observe handed over of each
// throttle and transient fault it retries.
func (s *Store) Attach(rt dedup.Runtime) { s.instr.Attach(rt) }

// Option configures a Store.
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// Prefix sets the start of every record's Redis key (default "onceq:").
// It must not contain '{': Redis Cluster hashes a key's first "{…}", which
// must be the record's own hash tag, or every record would share one slot
// (New refuses it).
func Prefix(p string) Option { return optionFunc(func(s *Store) { s.prefix = p }) }

// Grace sets how long a record stays stored past its ExpiresAt before
// Redis deletes it (default 10 minutes). It must be positive (New refuses
// another) and longer than every worker's skew margin plus the skew
// between the workers' clocks and the Redis server's, so that a lease its
// holder still counts as live is never deleted: a claim whose SkewMargin
// is not under Grace is refused (an *OptionError).
func Grace(d time.Duration) Option { return optionFunc(func(s *Store) { s.grace = d }) }

// WithWait makes every write wait until replicas replicas have it, or
// timeout passes (Redis's WAIT), one more round trip per write. A write
// fewer replicas acknowledged returns a Transient *ReplicationError: it
// is applied on the primary but may not survive a failover.
func WithWait(replicas int, timeout time.Duration) Option {
	return optionFunc(func(s *Store) { s.wait, s.waitT = replicas, timeout })
}

// MaxResponseSize sets the longest response the Store keeps, in bytes
// (default dedup.DefaultMaxResponseSize; n <= 0 keeps the default). A
// longer one is refused by Complete and ClaimComplete with a
// *dedup.ResponseTooLargeError before anything is sent, and nothing is
// written: every duplicate's claim reads the response back.
func MaxResponseSize(n int) Option {
	return optionFunc(func(s *Store) {
		if n > 0 {
			s.maxResponse = n
		}
	})
}

// WithRetryPolicy sets the backoff for transient faults (default
// retry.DefaultPolicy()): a lost connection, a server LOADING or BUSY, a
// Cluster slot moving or down, a replica that has not caught up
// (*ReplicationError), an OOM (as a throttle). go-redis retries a lost
// connection itself first (Options.MaxRetries, 3 by default); give the
// client MaxRetries -1 to leave every retry to this policy, which counts
// and logs them.
func WithRetryPolicy(p retry.Policy) Option {
	return optionFunc(func(s *Store) { s.instrCfg.Policy = p })
}

// Hook is an observer of the store, given to WithHooks: it implements
// storeinstr.HookStoreCall (every call to Redis), storeinstr.HookStoreRetry
// (every retry), or both. It is every store's Hook (storeinstr.Hook), so
// one observer serves them all; New refuses one that implements none, so
// a misspelt method is an error, not silence.
type Hook = storeinstr.Hook

// WithHooks adds observers (see Hook).
func WithHooks(hooks ...Hook) Option {
	return optionFunc(func(s *Store) { s.instrCfg.Hooks = append(s.instrCfg.Hooks, hooks...) })
}

// WithLogger sets the logger for retries and faults given up on (when
// given none, the logger of the Consumer or Guard that uses the store,
// else slog.Default(); nil counts as none).
func WithLogger(l *slog.Logger) Option { return optionFunc(func(s *Store) { s.instrCfg.Logger = l }) }

// WithMeterProvider sets where the store's metrics go (default the global
// MeterProvider): db.client.operation.duration, onceq.store.errors and
// onceq.store.retries, as every store has them (see package storeinstr),
// with db.system.name redis.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(s *Store) { s.instrCfg.MeterProvider = mp })
}

// WithTracerProvider sets where the spans of the store's calls go
// (default the global TracerProvider): a client span per call, retries
// included, under the caller's span when that one is recorded.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(s *Store) { s.instrCfg.TracerProvider = tp })
}

// New returns a Store on c (a *redis.Client, *redis.ClusterClient or
// *redis.Ring's universal form). It does not touch the server: call Check
// before the first claim (the consumer does). An unsafe option is an
// *OptionError (errors.Is ErrInvalidConfig), and so is every other
// configuration error.
func New(c redis.UniversalClient, opts ...Option) (*Store, error) {
	s := &Store{c: c, prefix: "onceq:", grace: 10 * time.Minute,
		takeover: redis.NewScript(takeoverScript), complete: redis.NewScript(completeScript),
		fail: redis.NewScript(failScript), extend: redis.NewScript(extendScript), maxResponse: dedup.DefaultMaxResponseSize}
	for _, o := range opts {
		if o != nil {
			o.apply(s)
		}
	}
	switch {
	case s.grace <= 0:
		return nil, &OptionError{Option: "Grace", Reason: fmt.Sprintf("%v must be positive: Redis would delete a lease its holder still counts as live", s.grace)}
	case strings.IndexByte(s.prefix, '{') >= 0:
		return nil, &OptionError{Option: "Prefix", Reason: "must not contain '{': Redis Cluster hashes a key's first {…}, which must be the record's own hash tag, or every record shares one slot"}
	case c == nil || configerr.NilValue(c):
		return nil, fmt.Errorf("redisstore: %w: no client", ErrInvalidConfig)
	}
	in, err := storeinstr.New(storeinstr.SystemRedis, "redisstore", errorCode, s.instrCfg)
	if err != nil {
		return nil, err
	}
	s.instr, s.instrCfg = in, storeinstr.Config{}
	return s, nil
}

// checkMargin refuses a claim whose skew margin Grace does not exceed:
// Redis could delete the lease while the claimer still counts it held, and
// another claim would take it from its live holder.
func (s *Store) checkMargin(margin time.Duration) error {
	if margin < s.grace {
		return nil
	}
	return &OptionError{Option: "Grace", Reason: fmt.Sprintf("%v must exceed the claim's skew margin %v: Redis would delete a lease its holder still counts as live", s.grace, margin)}
}

// redisKey is the record's Redis key: the prefix, and the key's SHA-256 as
// the hash tag that places it in one Cluster slot. (Built in one
// allocation: it is made on every call.)
func (s *Store) redisKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	var tag [2 * sha256.Size]byte
	hex.Encode(tag[:], sum[:])
	var b strings.Builder
	b.Grow(len(s.prefix) + len(tag) + 2)
	b.WriteString(s.prefix)
	b.WriteByte('{')
	b.Write(tag[:])
	b.WriteByte('}')
	return b.String()
}

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// expireAt is the key's expiry in Unix milliseconds: Grace after at.
func (s *Store) expireAt(at time.Time) int64 { return at.Add(s.grace).UnixMilli() }

// Check implements dedup.Store: the server answers, and this user may run
// the scripts (they are loaded, so the first call finds them cached).
func (s *Store) Check(ctx context.Context) error {
	return s.instr.Do(ctx, storeinstr.OpCheck, func(ctx context.Context, _ int) error {
		if err := s.c.Ping(ctx).Err(); err != nil {
			return s.wrap("check", err)
		}
		for _, sc := range []*redis.Script{s.takeover, s.complete, s.fail, s.extend} {
			if err := sc.Load(ctx, s.c).Err(); err != nil {
				return s.wrap("check", err)
			}
		}
		return nil
	})
}

// Claim implements dedup.Store: one SET for a new key; a GET more on a
// key that has a record, and a script to take an expired one over.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	return s.claim(ctx, "claim", storeinstr.OpClaim, req.Key, req.Owner, req.PayloadHash, dedup.StatusPending, nil, req.Now, req.LeaseUntil, req.SkewMargin)
}

// claim runs claimAs under the instruments. A claim retried after a lost
// connection that meets its own earlier attempt's record has won
// (storeinstr.ClaimOnRetry).
func (s *Store) claim(ctx context.Context, op, instrOp, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	if key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	if err := s.checkMargin(margin); err != nil {
		return dedup.Claim{}, err
	}
	return s.instr.Claim(ctx, instrOp, key, owner, status, func(ctx context.Context) (dedup.Claim, error) {
		c, err := s.claimAs(ctx, key, owner, hash, status, resp, now, expires, margin)
		return c, s.wrap(op, err)
	})
}

// ClaimComplete implements dedup.Store, without Writes only.
func (s *Store) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if err := noWrites(req.Writes); err != nil {
		return dedup.Claim{}, err
	}
	if err := noOutbox(req.Outbox); err != nil {
		return dedup.Claim{}, err
	}
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return dedup.Claim{}, err
	}
	return s.claim(ctx, "claim-complete", storeinstr.OpClaimComplete, req.Key, req.Owner, req.PayloadHash, dedup.StatusCompleted, req.Response, req.Now, req.ExpiresAt, req.SkewMargin)
}

// noOutbox refuses outgoing messages: without transactions, the Redis
// store cannot commit them with COMPLETED, and its Capabilities give no
// Outbox.
func noOutbox(msgs []outbox.Message) error {
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %d outgoing messages (the Redis store commits no outbox)", dedup.ErrUnsupportedWrite, len(msgs))
	}
	return nil
}

// noWrites refuses business writes: without transactions, the Redis
// store cannot commit them with COMPLETED, and its Capabilities declare
// no write kind.
func noWrites(ws []dedup.Write) error {
	for i, w := range ws {
		if w == nil {
			return &dedup.NilWriteError{Index: i, Type: "<nil>"}
		}
	}
	if len(ws) > 0 {
		return fmt.Errorf("%w: %T (the Redis store commits no business writes)", dedup.ErrUnsupportedWrite, ws[0])
	}
	return nil
}

// maxClaimRounds bounds a claim's rounds of read and conditional write
// that lose to another writer between the two; each loss finds a newer
// record, most often a live one (and so an answer). (Not the record's
// Takeovers, which count abandoned leases.)
const maxClaimRounds = 8

// errContended: the record kept changing under a claim's takeovers.
var errContended = errors.New("the record changed under every takeover")

// claimAs writes the record of a claim. SET NX writes a new key in one
// call, its reply a plain OK; on a key that has a record, a GET reads the
// record: a live one answers the claim, an expired one is taken over by a
// script that writes only while the record is still the one read. (SET
// NX GET would read it in the same call, but answers a new key with a
// nil reply, which go-redis runs through its error and retry checks: more
// client work on every new key to save a call on a duplicate.)
func (s *Store) claimAs(ctx context.Context, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	rk, px := s.redisKey(key), s.expireAt(expires)
	rec := &dedup.Record{Status: status, Version: 1, Owner: owner, PayloadHash: hash, Response: resp, CreatedAt: now, ExpiresAt: expires}
	val, err := encode(rec)
	if err != nil {
		return dedup.Claim{}, err
	}
	written, err := s.setNX(ctx, rk, val, px)
	var prev *dedup.Record
	for range maxClaimRounds {
		if err != nil {
			return dedup.Claim{}, err
		}
		if written {
			return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: rec.Version}, Attempt: rec.Attempts + 1,
				Previous: prev, Takeovers: rec.Takeovers}, nil
		}
		cur, gerr := s.c.Get(ctx, rk).Result()
		if errors.Is(gerr, redis.Nil) { // Redis expired it since: a new key again
			rec.Version, rec.Attempts, rec.Takeovers, prev = 1, 0, 0, nil
			if val, err = encode(rec); err != nil {
				return dedup.Claim{}, err
			}
			written, err = s.setNX(ctx, rk, val, px)
			continue
		}
		if gerr != nil {
			return dedup.Claim{}, gerr
		}
		old, derr := decode(key, cur)
		if derr != nil {
			return dedup.Claim{}, derr
		}
		if held(old, now, margin) {
			return dedup.Claim{Existing: *old}, nil
		}
		// the record's failed runs and takeovers carry over, and one
		// takeover more is counted over an abandoned (PENDING) lease; past
		// a COMPLETED record's retention a key is a new message
		rec.Version, rec.Attempts, rec.Takeovers, prev = old.Version+1, 0, 0, old
		if old.Status != dedup.StatusCompleted {
			rec.Attempts, rec.Takeovers = old.Attempts, old.Takeovers
		}
		if old.Status == dedup.StatusPending {
			rec.Takeovers++
		}
		if val, err = encode(rec); err != nil {
			return dedup.Claim{}, err
		}
		var n int
		n, err = s.script(ctx, s.takeover, rk, cur, val, px).Int()
		written = n == 1
	}
	return dedup.Claim{}, retry.WithClass(fmt.Errorf("redisstore: claim key_hash %s: %w", dedup.KeyHash(key), errContended), retry.Transient)
}

func cmp(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// held reports whether old still blocks a claim at now: it is live, or a
// lease expired by no more than the claimer's skew margin. Times compare
// in the microseconds they are stored in.
func held(old *dedup.Record, now time.Time, margin time.Duration) bool {
	if old.Status != dedup.StatusPending {
		margin = 0
	}
	return old.ExpiresAt.UnixMicro() >= now.Add(-max(margin, 0)).UnixMicro()
}

// Get implements dedup.Store.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	var r dedup.Record
	var answer error
	err := s.instr.Do(ctx, storeinstr.OpGet, func(ctx context.Context, _ int) error {
		var err error
		r, answer, err = s.read(ctx, key)
		return err
	})
	if err != nil {
		return dedup.Record{}, err
	}
	return r, answer
}

// read reads key's record once: answer is dedup.ErrNotFound or a corrupt
// record (what the store holds), err a failed request.
func (s *Store) read(ctx context.Context, key string) (r dedup.Record, answer, err error) {
	v, err := s.c.Get(ctx, s.redisKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return dedup.Record{}, fmt.Errorf("%w: key_hash %s", dedup.ErrNotFound, dedup.KeyHash(key)), nil
	}
	if err != nil {
		return dedup.Record{}, nil, s.wrap("get", err)
	}
	rec, err := decode(key, v)
	if err != nil {
		return dedup.Record{}, err, nil
	}
	return *rec, nil, nil
}

// heads are the head of the PENDING record l holds and, with next, the
// head a script writes in its place: next, the version after the lease's
// (one buffer for both, as they go with every lease write).
func heads(l dedup.Lease, next dedup.Status) (held, written []byte, err error) {
	b := make([]byte, 0, 2*(len(l.Owner)+48))
	b, _ = appendHead(b, dedup.StatusPending, l.Version, l.Owner)
	n := len(b)
	if next == "" {
		return b, nil, nil
	}
	if b, err = appendHead(b, next, l.Version+1, l.Owner); err != nil {
		return nil, nil, err
	}
	return b[:n:n], b[n:], nil
}

// fenced runs a lease script on args under the instruments and turns its
// 0 into ErrLeaseLost. A retried script that lost its fence reads the
// record: when it is what the script writes (status done, one version
// on), its earlier attempt ran unseen, and the call succeeded ("" for the
// extend script, which keeps the version and which a retry runs again).
func (s *Store) fenced(ctx context.Context, op, instrOp string, sc *redis.Script, l dedup.Lease, done dedup.Status, args []any) error {
	var n int
	var corrupt error
	retried := false
	err := s.instr.Do(ctx, instrOp, func(ctx context.Context, attempt int) error {
		retried, corrupt = attempt > 1, nil
		var err error
		n, err = s.script(ctx, sc, s.redisKey(l.Key), args...).Int()
		var re redis.Error
		if errors.As(err, &re) && strings.HasPrefix(re.Error(), "CORRUPT ") {
			// What the store holds, not a failed request.
			corrupt = &dedup.CorruptRecordError{KeyHash: dedup.KeyHash(l.Key), Err: fmt.Errorf("redisstore: %s: %w", op, err)}
			return nil
		}
		return s.wrap(op, err)
	})
	switch {
	case err != nil:
		return err
	case corrupt != nil:
		return corrupt
	case n == 0 && retried && done != "":
		var cur dedup.Record
		var answer error
		err := s.instr.Do(ctx, instrOp, func(ctx context.Context, _ int) error {
			var err error
			cur, answer, err = s.read(ctx, l.Key)
			return err
		})
		if err != nil {
			return fmt.Errorf("redisstore: %s: a retry lost the fence and the record could not be read: %w", op, err)
		}
		if answer == nil && storeinstr.SettledOnRetry(cur, true, l, done) {
			return nil
		}
	}
	if n == 0 {
		return fmt.Errorf("redisstore: %s: %w: key_hash %s version %d", op, dedup.ErrLeaseLost, dedup.KeyHash(l.Key), l.Version)
	}
	return nil
}

// Complete implements dedup.Store. Writes are not supported.
func (s *Store) Complete(ctx context.Context, req dedup.CompleteRequest) error {
	if err := noWrites(req.Writes); err != nil {
		return err
	}
	if err := noOutbox(req.Outbox); err != nil {
		return err
	}
	if err := dedup.CheckResponse(req.Response, s.maxResponse); err != nil {
		return err
	}
	h, next, _ := heads(req.Lease, dedup.StatusCompleted)
	return s.fenced(ctx, "complete", storeinstr.OpComplete, s.complete, req.Lease, dedup.StatusCompleted, []any{h, next, micros(req.ExpiresAt), req.Response, s.expireAt(req.ExpiresAt)})
}

// Fail implements dedup.Store. The reason is stored as
// dedup.StorableReason makes it (valid UTF-8, bounded).
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	h, next, err := heads(req.Lease, failStatus(req))
	if err != nil {
		return err
	}
	return s.fenced(ctx, "fail", storeinstr.OpFail, s.fail, req.Lease, failStatus(req), []any{h, next, micros(req.RetryAt), s.expireAt(req.RetryAt),
		appendString(nil, dedup.StorableReason(req.Reason)), flag(req.ResetAttempts), flag(req.RefundAttempt)})
}

// Extend implements dedup.Store.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	h, _, _ := heads(req.Lease, "")
	return s.fenced(ctx, "extend", storeinstr.OpExtend, s.extend, req.Lease, "", []any{h, micros(req.LeaseUntil), s.expireAt(req.LeaseUntil)})
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// setNX sends SET key val NX PXAT px and reports whether it wrote.
func (s *Store) setNX(ctx context.Context, rk string, val []byte, px int64) (bool, error) {
	cmd := redis.NewStatusCmd(ctx, "set", rk, val, "nx", "pxat", px)
	if s.wait <= 0 {
		_ = s.c.Process(ctx, cmd)
	} else {
		s.waitAfter(ctx, func(p redis.Pipeliner) redis.Cmder { _ = p.Process(ctx, cmd); return cmd })
	}
	ok, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	return ok == "OK", err
}

// script runs a script on the record rk.
func (s *Store) script(ctx context.Context, sc *redis.Script, rk string, args ...any) *redis.Cmd {
	keys := []string{rk}
	if s.wait <= 0 {
		return sc.Run(ctx, s.c, keys, args...)
	}
	var cmd *redis.Cmd
	s.waitAfter(ctx, func(p redis.Pipeliner) redis.Cmder { cmd = sc.Eval(ctx, p, keys, args...); return cmd })
	return cmd
}

// waitAfter sends the command queue puts in a pipeline, and WAIT after
// it (WAIT counts the writes of its own connection, which a pipeline
// shares); the command's error says when fewer replicas than WithWait's
// have it.
func (s *Store) waitAfter(ctx context.Context, queue func(redis.Pipeliner) redis.Cmder) {
	pipe := s.c.Pipeline()
	cmd := queue(pipe)
	wait := pipe.Do(ctx, "WAIT", s.wait, s.waitT.Milliseconds())
	// A nil reply (redis.Nil) is an answer, not a failure of the pipeline.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		if cmd.Err() == nil || errors.Is(cmd.Err(), redis.Nil) {
			cmd.SetErr(err)
		}
		return
	}
	if n, err := wait.Int(); err != nil || n < s.wait {
		cmd.SetErr(cmp(err, &ReplicationError{Want: s.wait, Got: n}))
	}
}

// ErrInvalidConfig wraps every unsafe option the Store refuses (an
// *OptionError, from New, or from a claim whose skew margin Grace does not
// exceed). It is the ErrInvalidConfig of every onceq package: errors.Is
// with any of them matches.
var ErrInvalidConfig = configerr.ErrInvalidConfig

// OptionError is an option value the Store refuses because it would be
// unsafe: which option, and why. Its retry class is Misconfigured.
type OptionError struct {
	Option string // the option's name, such as "Grace"
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("redisstore: %s: %s: %s", ErrInvalidConfig, e.Option, e.Reason)
}

// Unwrap makes errors.Is(err, ErrInvalidConfig) true.
func (e *OptionError) Unwrap() error { return ErrInvalidConfig }

// RetryClass: the configuration must change.
func (e *OptionError) RetryClass() retry.Class { return retry.Misconfigured }

// ReplicationError is a write fewer replicas acknowledged than WithWait
// asks: applied on the primary, not yet safe from a failover.
type ReplicationError struct{ Want, Got int }

func (e *ReplicationError) Error() string {
	return fmt.Sprintf("redisstore: write reached %d of %d replicas", e.Got, e.Want)
}

// RetryClass: replicas catch up, or a failover settles.
func (e *ReplicationError) RetryClass() retry.Class { return retry.Transient }

// Error is a failed call to Redis: which operation, and the retry class
// of the cause.
type Error struct {
	Op    string
	Err   error
	class retry.Class
}

func (e *Error) Error() string { return fmt.Sprintf("redisstore: %s (%s): %v", e.Op, e.class, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// RetryClass is the class of the cause (see classOf).
func (e *Error) RetryClass() retry.Class { return e.class }

func (s *Store) wrap(op string, err error) error {
	if err == nil || errors.Is(err, dedup.ErrLeaseLost) || errors.Is(err, dedup.ErrEmptyKey) {
		return err
	}
	var ce retry.Classifier
	if errors.As(err, &ce) {
		return err // already classified (corrupt record, replication)
	}
	return &Error{Op: op, Err: err, class: classOf(err)}
}

// errorCode is the prefix of a Redis error reply ("BUSY", "READONLY"),
// "" for another error (a lost connection): db.response.status_code of
// the store's metrics.
func errorCode(err error) string {
	var re redis.Error
	if !errors.As(err, &re) {
		return ""
	}
	prefix, _, _ := strings.Cut(re.Error(), " ")
	return prefix
}

// classOf sorts Redis's error prefixes into retry classes; network errors
// and unknown replies are Transient as retry.Classify has them.
func classOf(err error) retry.Class {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return retry.Cancelled
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return retry.Classify(err)
	}
	prefix, _, _ := strings.Cut(re.Error(), " ")
	switch prefix {
	case "NOPERM", "NOAUTH", "WRONGPASS", "WRONGTYPE", "NOSCRIPT":
		// WRONGTYPE: something else lives under the prefix.
		return retry.Misconfigured
	case "LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK":
		return retry.Transient
	case "OOM":
		return retry.Throttled
	case "CORRUPT": // a script found a record it cannot read
		return retry.Permanent
	}
	return retry.Transient
}

// failStatus is the status a Fail writes: DEAD_LETTER when the request
// keeps a dead letter the broker would not take, else FAILED.
func failStatus(req dedup.FailRequest) dedup.Status {
	if req.DeadLetter {
		return dedup.StatusDeadLetter
	}
	return dedup.StatusFailed
}
