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

	claim, complete, fail, extend *redis.Script
}

var _ dedup.Store = (*Store)(nil)

// Capabilities implements dedup.Store: ClaimComplete works (without
// Writes).
func (s *Store) Capabilities() dedup.Capabilities { return dedup.Capabilities{ClaimComplete: true} }

// Option configures a Store.
type Option interface{ apply(*Store) }

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// Prefix sets the start of every record's Redis key (default "onceq:").
func Prefix(p string) Option { return optionFunc(func(s *Store) { s.prefix = p }) }

// Grace sets how long a record stays stored past its ExpiresAt before
// Redis deletes it (default 10 minutes): longer than any worker's skew
// margin, so a lease its holder still counts as live is never deleted.
func Grace(d time.Duration) Option { return optionFunc(func(s *Store) { s.grace = d }) }

// WithWait makes every write wait until replicas replicas have it, or
// timeout passes (Redis's WAIT), one more round trip per write. A write
// fewer replicas acknowledged returns a Transient *ReplicationError: it
// is applied on the primary but may not survive a failover.
func WithWait(replicas int, timeout time.Duration) Option {
	return optionFunc(func(s *Store) { s.wait, s.waitT = replicas, timeout })
}

// New returns a Store on c (a *redis.Client, *redis.ClusterClient or
// *redis.Ring's universal form). It does not touch the server: call Check
// before the first claim (the consumer does).
func New(c redis.UniversalClient, opts ...Option) *Store {
	s := &Store{c: c, prefix: "onceq:", grace: 10 * time.Minute,
		claim: redis.NewScript(claimScript), complete: redis.NewScript(completeScript),
		fail: redis.NewScript(failScript), extend: redis.NewScript(extendScript)}
	for _, o := range opts {
		if o != nil {
			o.apply(s)
		}
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
// the scripts (they are loaded, so the first claim finds them cached).
func (s *Store) Check(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return s.wrap("check", err)
	}
	for _, sc := range []*redis.Script{s.claim, s.complete, s.fail, s.extend} {
		if err := sc.Load(ctx, s.c).Err(); err != nil {
			return s.wrap("check", err)
		}
	}
	return nil
}

// Claim implements dedup.Store, in one script.
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

func (s *Store) claimAs(ctx context.Context, key, owner, hash string, status dedup.Status, resp []byte, now, expires time.Time, margin time.Duration) (dedup.Claim, error) {
	if key == "" {
		return dedup.Claim{}, dedup.ErrEmptyKey
	}
	res, err := s.run(ctx, s.claim, key, string(status), owner, hash, resp,
		micros(now), micros(expires), micros(now.Add(-max(margin, 0))), s.expireAt(expires)).Slice()
	if err != nil {
		return dedup.Claim{}, err
	}
	if len(res) == 2 {
		old, err := parseRecord(key, res[1])
		if err != nil || old == nil {
			return dedup.Claim{}, cmp(err, errors.New("claim script: a live record without fields"))
		}
		return dedup.Claim{Existing: *old}, nil
	}
	if len(res) != 4 {
		return dedup.Claim{}, fmt.Errorf("claim script: %d values in its reply", len(res))
	}
	version, _ := res[1].(int64)
	attempts, _ := res[2].(int64)
	prev, err := parseRecord(key, res[3])
	if err != nil {
		return dedup.Claim{}, err
	}
	return dedup.Claim{Acquired: true, Lease: dedup.Lease{Key: key, Owner: owner, Version: version}, Attempt: int(attempts) + 1, Previous: prev}, nil
}

func cmp(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// parseRecord reads a record from a flat field/value array (HGETALL's),
// nil when it is empty.
func parseRecord(key string, v any) (*dedup.Record, error) {
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return fromMap(key, m)
}

func fromMap(key string, m map[string]string) (*dedup.Record, error) {
	r := &dedup.Record{Key: key, Status: dedup.Status(m["status"]), Owner: m["owner"], PayloadHash: m["payload_hash"], LastError: m["last_error"]}
	if resp := m["response"]; resp != "" {
		r.Response = []byte(resp)
	}
	var errs []error
	num := func(f string) int64 {
		n, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("field %s: %w", f, err))
		}
		return n
	}
	r.Version = num("version")
	r.Attempts = int(num("attempts"))
	r.CreatedAt = time.UnixMicro(num("created_at"))
	r.ExpiresAt = time.UnixMicro(num("expires_at"))
	if err := errors.Join(errs...); err != nil {
		return nil, retry.WithClass(fmt.Errorf("redisstore: corrupt record key_hash %s: %w", dedup.KeyHash(key), err), retry.Permanent)
	}
	return r, nil
}

// Get implements dedup.Store.
func (s *Store) Get(ctx context.Context, key string) (dedup.Record, error) {
	m, err := s.c.HGetAll(ctx, s.redisKey(key)).Result()
	if err != nil {
		return dedup.Record{}, s.wrap("get", err)
	}
	if len(m) == 0 {
		return dedup.Record{}, fmt.Errorf("%w: key_hash %s", dedup.ErrNotFound, dedup.KeyHash(key))
	}
	r, err := fromMap(key, m)
	if err != nil {
		return dedup.Record{}, err
	}
	return *r, nil
}

// fenced runs a lease script and turns its 0 into ErrLeaseLost.
func (s *Store) fenced(ctx context.Context, op string, sc *redis.Script, l dedup.Lease, args ...any) error {
	n, err := s.run(ctx, sc, l.Key, append([]any{l.Owner, l.Version}, args...)...).Int()
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
	return s.fenced(ctx, "complete", s.complete, req.Lease, req.Response, micros(req.ExpiresAt), s.expireAt(req.ExpiresAt))
}

// Fail implements dedup.Store.
func (s *Store) Fail(ctx context.Context, req dedup.FailRequest) error {
	return s.fenced(ctx, "fail", s.fail, req.Lease, req.Reason, micros(req.RetryAt), s.expireAt(req.RetryAt),
		flag(req.ResetAttempts), flag(req.RefundAttempt), string(failStatus(req)))
}

// Extend implements dedup.Store.
func (s *Store) Extend(ctx context.Context, req dedup.ExtendRequest) error {
	return s.fenced(ctx, "extend", s.extend, req.Lease, micros(req.LeaseUntil), s.expireAt(req.LeaseUntil))
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// run runs a script. With WithWait, WAIT follows it in one pipeline:
// WAIT counts the writes of its own connection, which a pipeline shares.
func (s *Store) run(ctx context.Context, sc *redis.Script, key string, args ...any) *redis.Cmd {
	keys := []string{s.redisKey(key)}
	if s.wait <= 0 {
		return sc.Run(ctx, s.c, keys, args...)
	}
	pipe := s.c.Pipeline()
	cmd := sc.Eval(ctx, pipe, keys, args...)
	wait := pipe.Do(ctx, "WAIT", s.wait, s.waitT.Milliseconds())
	if _, err := pipe.Exec(ctx); err != nil {
		if cmd.Err() == nil {
			cmd.SetErr(err)
		}
		return cmd
	}
	if n, err := wait.Int(); err != nil || n < s.wait {
		cmd.SetErr(cmp(err, &ReplicationError{Want: s.wait, Got: n}))
	}
	return cmd
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
