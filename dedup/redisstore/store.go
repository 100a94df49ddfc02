package redisstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/onceq/onceq/dedup"
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
}

var _ dedup.Store = (*Store)(nil)

// Capabilities implements dedup.Store: ClaimComplete works (without
// Writes).
func (s *Store) Capabilities() dedup.Capabilities { return dedup.Capabilities{ClaimComplete: true} }

// Option configures a Store.
type Option func(*Store)

// Prefix sets the start of every record's Redis key (default "onceq:").
func Prefix(p string) Option { return func(s *Store) { s.prefix = p } }

// Grace sets how long a record stays stored past its ExpiresAt before
// Redis deletes it (default 10 minutes): longer than any worker's skew
// margin, so a lease its holder still counts as live is never deleted.
func Grace(d time.Duration) Option { return func(s *Store) { s.grace = d } }

// WithWait makes every write wait until replicas replicas have it, or
// timeout passes (Redis's WAIT), one more round trip per write. A write
// fewer replicas acknowledged returns a Transient *ReplicationError: it
// is applied on the primary but may not survive a failover.
func WithWait(replicas int, timeout time.Duration) Option {
	return func(s *Store) { s.wait, s.waitT = replicas, timeout }
}

// New returns a Store on c (a *redis.Client, *redis.ClusterClient or
// *redis.Ring's universal form). It does not touch the server: call Check
// before the first claim (the consumer does).
func New(c redis.UniversalClient, opts ...Option) *Store {
	s := &Store{c: c, prefix: "onceq:", grace: 10 * time.Minute,
		takeover: redis.NewScript(takeoverScript), complete: redis.NewScript(completeScript),
		fail: redis.NewScript(failScript), extend: redis.NewScript(extendScript)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// redisKey is the record's Redis key: the prefix, and the key's SHA-256 as
// the hash tag that places it in one Cluster slot.
func (s *Store) redisKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.prefix + "{" + hex.EncodeToString(sum[:]) + "}"
}

func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// expireAt is the key's expiry in Unix milliseconds: Grace after at.
func (s *Store) expireAt(at time.Time) int64 { return at.Add(s.grace).UnixMilli() }

// Check implements dedup.Store: the server answers, and this user may run
// the scripts (they are loaded, so the first call finds them cached).
func (s *Store) Check(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return s.wrap("check", err)
	}
	for _, sc := range []*redis.Script{s.takeover, s.complete, s.fail, s.extend} {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return s.wrap("check", err)
		}
	}
	return nil
}

// Claim implements dedup.Store: one SET for a new key, a script more to
// take over an expired record.
func (s *Store) Claim(ctx context.Context, req dedup.ClaimRequest) (dedup.Claim, error) {
	c, err := s.claimAs(ctx, req.Key, req.Owner, req.PayloadHash, dedup.StatusPending, nil, req.Now, req.LeaseUntil, req.SkewMargin)
	return c, s.wrap("claim", err)
}

// ClaimComplete implements dedup.Store, without Writes only.
func (s *Store) ClaimComplete(ctx context.Context, req dedup.ClaimCompleteRequest) (dedup.Claim, error) {
	if err := noWrites(req.Writes); err != nil {
		return dedup.Claim{}, err
	}
	c, err := s.claimAs(ctx, req.Key, req.Owner, req.PayloadHash, dedup.StatusCompleted, req.Response, req.Now, req.ExpiresAt, req.SkewMargin)
	return c, s.wrap("claim-complete", err)
}

func noWrites(ws []any) error {
	if len(ws) > 0 {
		return fmt.Errorf("%w: %T (the Redis store commits no business writes)", dedup.ErrUnsupportedWrite, ws[0])
	}
	return nil
}

// maxTakeovers bounds a claim's takeovers that lose to another writer
// between its read and its write; each loss finds a newer record, most
// often a live one (and so an answer).
const maxTakeovers = 8

// errContended: the record kept changing under a claim's takeovers.
var errContended = errors.New("the record changed under every takeover")

// claimAs writes the record of a claim: SET NX GET writes a new key and,
// on a key that has a record, returns it instead (Redis 7) in the same
// call. A live record answers the claim; an expired one is taken over by
// a script that writes only while the record is still the one read.
func (s *Store) claimAs(ctx context.Context, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	if key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	rk, px := s.redisKey(key), s.expireAt(expires)
	rec := &dedup.Record{Status: status, Version: 1, Owner: owner, PayloadHash: hash, Response: resp, CreatedAt: now, ExpiresAt: expires}
	val, err := encode(rec)
	if err != nil {
		return dedup.Claim{}, err
	}
	cur, err := s.setNX(ctx, rk, val, px)
	var prev *dedup.Record
	for range maxTakeovers {
		if errors.Is(err, redis.Nil) { // written
			return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: rec.Version}, Attempt: rec.Attempts + 1, Previous: prev}, nil
		}
		if err != nil {
			return dedup.Claim{}, err
		}
		old, derr := decode(key, cur)
		if derr != nil {
			return dedup.Claim{}, derr
		}
		if held(old, now, margin) {
			return dedup.Claim{Existing: *old}, nil
		}
		// failed runs carry over a takeover; past a COMPLETED record's retention a key is a new message
		rec.Version, rec.Attempts, prev = old.Version+1, 0, old
		if old.Status != dedup.StatusCompleted {
			rec.Attempts = old.Attempts
		}
		if val, err = encode(rec); err != nil {
			return dedup.Claim{}, err
		}
		cur, err = s.takeOver(ctx, rk, cur, val, px)
		if errors.Is(err, errGone) { // Redis expired it: a new key again
			rec.Version, rec.Attempts, prev = 1, 0, nil
			if val, err = encode(rec); err != nil {
				return dedup.Claim{}, err
			}
			cur, err = s.setNX(ctx, rk, val, px)
		}
	}
	return dedup.Claim{}, retry.WithClass(fmt.Errorf("redisstore: claim key_hash %s: %w", dedup.KeyHash(key), errContended), retry.Transient)
}

// errGone: a takeover found no record.
var errGone = errors.New("no record")

// takeOver writes val over the record while it is still old: redis.Nil
// when it wrote (as SET NX GET says it), else the record now stored, or
// errGone.
func (s *Store) takeOver(ctx context.Context, rk, old string, val []byte, px int64) (string, error) {
	r, err := s.script(ctx, s.takeover, rk, old, val, px).Result()
	if errors.Is(err, redis.Nil) {
		return "", errGone
	}
	if err != nil {
		return "", err
	}
	switch r := r.(type) {
	case int64:
		return "", redis.Nil
	case string:
		return r, nil
	}
	return "", fmt.Errorf("takeover script: a reply of type %T", r)
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
	v, err := s.c.Get(ctx, s.redisKey(key)).Result()
	if errors.Is(err, redis.Nil) {
		return dedup.Record{}, fmt.Errorf("%w: key_hash %s", dedup.ErrNotFound, dedup.KeyHash(key))
	}
	if err != nil {
		return dedup.Record{}, s.wrap("get", err)
	}
	r, err := decode(key, v)
	if err != nil {
		return dedup.Record{}, err
	}
	return *r, nil
}

// head is the head of the PENDING record l holds.
func head(l dedup.Lease) string {
	b, _ := appendHead(nil, dedup.StatusPending, l.Version, l.Owner)
	return string(b)
}

// fenced runs a lease script and turns its 0 into ErrLeaseLost. The
// first argument is the lease's head, the second (but for Extend) the
// head it writes: next, the version after the lease's.
func (s *Store) fenced(ctx context.Context, op string, sc *redis.Script, l dedup.Lease, next dedup.Status, args ...any) error {
	a := []any{head(l)}
	if next != "" {
		h, err := appendHead(nil, next, l.Version+1, l.Owner)
		if err != nil {
			return err
		}
		a = append(a, h)
	}
	n, err := s.script(ctx, sc, s.redisKey(l.Key), append(a, args...)...).Int()
	if err != nil {
		return s.wrap(op, err)
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
	return s.fenced(ctx, "complete", s.complete, req.Lease, dedup.StatusCompleted, micros(req.ExpiresAt), req.Response, s.expireAt(req.ExpiresAt))
}

// Fail implements dedup.Store.
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	return s.fenced(ctx, "fail", s.fail, req.Lease, failStatus(req), micros(req.RetryAt), s.expireAt(req.RetryAt),
		appendString(nil, req.Reason), flag(req.ResetAttempts), flag(req.RefundAttempt))
}

// Extend implements dedup.Store.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	return s.fenced(ctx, "extend", s.extend, req.Lease, "", micros(req.LeaseUntil), s.expireAt(req.LeaseUntil))
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// setNX sends SET key val NX GET PXAT px: redis.Nil when it wrote, else
// the value stored.
func (s *Store) setNX(ctx context.Context, rk string, val []byte, px int64) (string, error) {
	cmd := redis.NewStringCmd(ctx, "set", rk, val, "nx", "get", "pxat", px)
	if s.wait <= 0 {
		_ = s.c.Process(ctx, cmd)
	} else {
		s.waitAfter(ctx, func(p redis.Pipeliner) redis.Cmder { _ = p.Process(ctx, cmd); return cmd })
	}
	return cmd.Result()
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
