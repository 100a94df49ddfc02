package dedup

import (
	"errors"
	"fmt"

	"github.com/onceq/onceq/retry"
)

// Sentinel errors of the dedup layer. Test with errors.Is.
var (
	// ErrLeaseLost: the lease was taken over (expired and re-claimed) or
	// the record moved on; the caller must not ack nor apply effects.
	ErrLeaseLost = errors.New("dedup: lease lost")
	// ErrNotFound: no record is stored for the key.
	ErrNotFound = errors.New("dedup: record not found")
	// ErrBadNamespace: a namespace that cannot be part of a key (see
	// CheckNamespace). The error is a *NamespaceError.
	ErrBadNamespace = errors.New("dedup: bad namespace")
	// ErrEmptyKey: a message produced an empty idempotency key.
	ErrEmptyKey = errors.New("dedup: empty idempotency key")
	// ErrKeyReuse: the key is live with a different payload.
	ErrKeyReuse = errors.New("dedup: idempotency key reused with a different payload")
	// ErrTooManyWrites: more business writes than one atomic commit holds.
	ErrTooManyWrites = errors.New("dedup: too many writes for one transaction")
	// ErrRecordTooLarge: the record with its response exceeds the Store's
	// item size limit.
	ErrRecordTooLarge = errors.New("dedup: record too large")
	// ErrUnsupportedWrite: a business write of a type the Store does not know.
	ErrUnsupportedWrite = errors.New("dedup: unsupported write type")
	// ErrKeyTooLong: a key the Store can neither hold nor map onto what it
	// holds. The error is a *KeyTooLongError.
	ErrKeyTooLong = errors.New("dedup: key too long for the store")
	// ErrResponseTooLarge: a response longer than the Store keeps (its
	// MaxResponseSize option). The error is a *ResponseTooLargeError.
	ErrResponseTooLarge = errors.New("dedup: response too large for the store")
	// ErrNilWrite: a nil business write (a nil interface, or a nil pointer
	// or func of the Store's own write type). The error is a
	// *NilWriteError.
	ErrNilWrite = errors.New("dedup: nil business write")
)

// KeyReuseError carries the record that holds the key. Its text names the
// key by KeyHash only.
type KeyReuseError struct {
	Key      string
	Existing Record
}

func (e *KeyReuseError) Error() string {
	return fmt.Sprintf("dedup: key_hash %s reused with a different payload (record is %s)", KeyHash(e.Key), e.Existing.Status)
}

// Is makes errors.Is(err, ErrKeyReuse) true.
func (e *KeyReuseError) Is(target error) bool { return target == ErrKeyReuse }

// BusinessConditionError reports that a business write's own condition
// failed, so the atomic commit was cancelled as a whole.
type BusinessConditionError struct {
	// Index of the failing write in the request's Writes.
	Index int
	// Reason as the Store reports it (e.g. "ConditionalCheckFailed").
	Reason string
	// Message is the Store's detail, if any.
	Message string
}

func (e *BusinessConditionError) Error() string {
	s := fmt.Sprintf("dedup: business write %d rejected: %s", e.Index, e.Reason)
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// TooManyWritesError says how many writes were given and what fits.
type TooManyWritesError struct{ Got, Max int }

func (e *TooManyWritesError) Error() string {
	return fmt.Sprintf("dedup: %d writes, at most %d fit one transaction", e.Got, e.Max)
}

// Is makes errors.Is(err, ErrTooManyWrites) true.
func (e *TooManyWritesError) Is(target error) bool { return target == ErrTooManyWrites }

// RecordTooLargeError says how large the record was and what fits.
type RecordTooLargeError struct{ Size, Max int }

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("dedup: record of %d bytes exceeds the %d byte limit", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrRecordTooLarge) true.
func (e *RecordTooLargeError) Is(target error) bool { return target == ErrRecordTooLarge }

// KeyTooLongError says which part of a key a Store could not hold (the
// DynamoDB tenant layout's tenant, say). It is the message's fault: retry
// class Permanent, so the message is dead-lettered, never retried.
type KeyTooLongError struct {
	KeyHash  string // KeyHash of the key
	Part     string // which part, in the Store's terms
	Len, Max int    // its length and what fits, in bytes
}

func (e *KeyTooLongError) Error() string {
	return fmt.Sprintf("dedup: key_hash %s: %s of %d bytes, at most %d fit", e.KeyHash, e.Part, e.Len, e.Max)
}

// Is makes errors.Is(err, ErrKeyTooLong) true.
func (e *KeyTooLongError) Is(target error) bool { return target == ErrKeyTooLong }

// RetryClass: the key will never fit.
func (e *KeyTooLongError) RetryClass() retry.Class { return retry.Permanent }

// ErrCorruptRecord: a stored record is not one a Store writes (a status
// outside the four, a version below 1, a negative attempt count, a field
// missing or unreadable), put there by hand, by another tool or by a
// fault. The error is a *CorruptRecordError, the same from every Store.
var ErrCorruptRecord = errors.New("dedup: corrupt record")

// CorruptRecordError says which record could not be read and why. Its
// retry class is Permanent: reading the record again gives the same bytes,
// so the message is dead-lettered, never run on what the record claims.
type CorruptRecordError struct {
	// KeyHash is KeyHash of the record's key (of its stored key where the
	// Store cannot know the key), never the key.
	KeyHash string
	Err     error // what is wrong, in the Store's terms
}

func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("%s: key_hash %s: %v", ErrCorruptRecord, e.KeyHash, e.Err)
}

func (e *CorruptRecordError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrCorruptRecord) true.
func (e *CorruptRecordError) Is(target error) bool { return target == ErrCorruptRecord }

// RetryClass: the record stays as it is.
func (e *CorruptRecordError) RetryClass() retry.Class { return retry.Permanent }

// ResponseTooLargeError says how long a response was and how long a
// response the Store keeps. It is the message's fault (a handler returned
// more than a cached answer may hold): retry class Permanent, nothing is
// committed, and the consumer dead-letters the message.
type ResponseTooLargeError struct{ Size, Max int }

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("dedup: response of %d bytes exceeds the store's limit of %d bytes (its MaxResponseSize option)", e.Size, e.Max)
}

// Is makes errors.Is(err, ErrResponseTooLarge) true.
func (e *ResponseTooLargeError) Is(target error) bool { return target == ErrResponseTooLarge }

// RetryClass: the same response never fits.
func (e *ResponseTooLargeError) RetryClass() retry.Class { return retry.Permanent }

// CheckResponse returns a *ResponseTooLargeError when resp is longer than
// max, the check every Store makes before it writes a response.
func CheckResponse(resp []byte, max int) error {
	if len(resp) > max {
		return &ResponseTooLargeError{Size: len(resp), Max: max}
	}
	return nil
}

// NilWriteError says which business write was nil, and of which type. It
// is the handler's fault: retry class Permanent, nothing is committed.
type NilWriteError struct {
	Index int
	Type  string // the write's type as %T prints it ("<nil>" for a nil interface)
}

func (e *NilWriteError) Error() string {
	return fmt.Sprintf("dedup: business write %d is a nil %s", e.Index, e.Type)
}

// Is makes errors.Is(err, ErrNilWrite) true.
func (e *NilWriteError) Is(target error) bool { return target == ErrNilWrite }

// RetryClass: the same writes are nil again.
func (e *NilWriteError) RetryClass() retry.Class { return retry.Permanent }
