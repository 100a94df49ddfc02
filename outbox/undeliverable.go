package outbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/onceq/onceq/retry"
)

// ErrUndeliverable marks an outgoing message that no Sender could ever
// deliver (see Message.Check). The error is an *UndeliverableError.
var ErrUndeliverable = errors.New("outbox: no destination can take the message")

// UndeliverableError is an outgoing message that no Sender could ever
// deliver, returned by a handler: the handler's fault, retry class
// Permanent. A consumer refuses it when it commits the handler's result,
// before the Store is called: nothing is committed, and the input is
// dead-lettered with this error as its reason.
type UndeliverableError struct {
	// Index is the message's place in the handler's Result.Outbox.
	Index int
	// Reason says what no destination takes.
	Reason string
}

func (e *UndeliverableError) Error() string {
	return fmt.Sprintf("outbox: outgoing message %d returned by the handler can be delivered nowhere: %s (a fault of the handler)", e.Index, e.Reason)
}

// Is makes errors.Is(err, ErrUndeliverable) true.
func (e *UndeliverableError) Is(target error) bool { return target == ErrUndeliverable }

// RetryClass: the handler returns the same message again.
func (e *UndeliverableError) RetryClass() retry.Class { return retry.Permanent }

// Check returns why no Sender could ever deliver m, or nil. It checks
// only what holds for every destination: a Destination that is empty,
// not valid UTF-8, or holds a control character (no queue URL, topic or
// queue name does). What one kind of destination refuses (a body too
// large for it, a name its broker does not allow) its Sender refuses, as
// an *RefusedError.
func (m *Message) Check() error {
	switch d := m.Destination; {
	case d == "":
		return errors.New("its Destination is empty")
	case !utf8.ValidString(d):
		return fmt.Errorf("its Destination %s is not valid UTF-8", strconv.QuoteToASCII(d))
	case hasControl(d):
		return fmt.Errorf("its Destination %s holds a control character", strconv.QuoteToASCII(d))
	}
	return nil
}

// CheckMessages returns an *UndeliverableError for the first of msgs that
// no Sender could ever deliver (Message.Check), or nil.
func CheckMessages(msgs []Message) error {
	for i := range msgs {
		if err := msgs[i].Check(); err != nil {
			return &UndeliverableError{Index: i, Reason: err.Error()}
		}
	}
	return nil
}

// Refusal is the *RefusedError a Sender answers for an entry that no
// destination could ever take (Message.Check), or nil. Every Sender checks
// it first, so that such an entry goes Dead rather than failing for ever.
func Refusal(e *Entry) error {
	if err := e.Check(); err != nil {
		return &RefusedError{Destination: e.Destination, Reason: err.Error()}
	}
	return nil
}

func hasControl(s string) bool { return strings.ContainsFunc(s, unicode.IsControl) }
