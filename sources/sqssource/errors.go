package sqssource

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/configerr"
	"github.com/onceq/onceq/retry"
)

// Errors of the SQS source. Test with errors.Is; the SDK error, when there
// is one, stays reachable with errors.As.
var (
	// ErrInvalidConfig wraps every configuration error New returns. It is
	// the ErrInvalidConfig of every onceq package: errors.Is with any of
	// them matches.
	ErrInvalidConfig = configerr.ErrInvalidConfig
	// ErrNoDeadLetterQueue: DeadLetter was called but the source has no
	// dead-letter queue (no DeadLetterQueue option, no RedrivePolicy). The
	// message is left where it is. It wraps
	// [broker.ErrNoDeadLetterDestination], so callers that know no SQS can
	// test for that.
	ErrNoDeadLetterQueue = fmt.Errorf("sqssource: no dead-letter queue configured: %w", broker.ErrNoDeadLetterDestination)
	// ErrDeliveryLost: the receipt handle no longer names a visible-to-us
	// delivery (its visibility ran out, or it was settled already), so
	// SQS refused the change. The message will be, or has been, delivered
	// again.
	ErrDeliveryLost = errors.New("sqssource: delivery lost (receipt handle invalid or message not in flight)")
	// ErrVisibilityLimit: an extension was cut short (or refused) by SQS's
	// 12-hour ceiling on a delivery's visibility.
	ErrVisibilityLimit = errors.New("sqssource: visibility would exceed the 12-hour limit")
	// ErrForeignMessage: the message was not delivered by this source.
	ErrForeignMessage = errors.New("sqssource: message not delivered by this source")
)

func invalidOption(format string, args ...any) error {
	return fmt.Errorf("sqssource: %w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// deliveryLost wraps an SDK error that means the receipt handle is dead.
func deliveryLost(op string, err error) error {
	return retry.WithClass(fmt.Errorf("%s: %w: %w", op, ErrDeliveryLost, err), retry.Permanent)
}

// lostHandleCode reports whether an SQS error code says the receipt handle
// is no longer good. With the JSON protocol the SDK may report the legacy
// query code ("AWS.SimpleQueueService.ReceiptHandleIsInvalid"), so only the
// last dotted part is compared.
func lostHandleCode(code string) bool {
	if i := strings.LastIndexByte(code, '.'); i >= 0 {
		code = code[i+1:]
	}
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "InvalidReceiptHandle":
		return true
	}
	return false
}

// isLostHandle reports whether err says the delivery is gone.
func isLostHandle(err error) bool {
	var rh *types.ReceiptHandleIsInvalid
	var ni *types.MessageNotInflight
	if errors.As(err, &rh) || errors.As(err, &ni) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		if lostHandleCode(api.ErrorCode()) {
			return true
		}
		// AWS reports an expired handle as InvalidParameterValue.
		return strings.Contains(api.ErrorMessage(), "receipt handle has expired")
	}
	return false
}

// batchEntryError is one failed entry of a batch call.
type batchEntryError struct {
	code, message string
	senderFault   bool
}

func (e *batchEntryError) Error() string {
	return fmt.Sprintf("sqssource: batch entry failed: %s: %s", e.code, e.message)
}

// ErrorCode lets retry.Classify see the entry's code.
func (e *batchEntryError) ErrorCode() string { return e.code }

// RetryClass: a sender fault will fail again; anything else is SQS's
// problem and worth another try.
func (e *batchEntryError) RetryClass() retry.Class {
	if c := retry.Classify(codeOnly(e.code)); c == retry.Throttled {
		return c
	}
	if e.senderFault {
		return retry.Permanent
	}
	return retry.Transient
}

// codeOnly is an error that is nothing but a code, to ask retry.Classify
// about a batch entry without recursing into RetryClass.
type codeOnly string

func (c codeOnly) Error() string     { return string(c) }
func (c codeOnly) ErrorCode() string { return string(c) }

func entryError(f types.BatchResultErrorEntry) *batchEntryError {
	e := &batchEntryError{senderFault: f.SenderFault}
	if f.Code != nil {
		e.code = *f.Code
	}
	if f.Message != nil {
		e.message = *f.Message
	}
	return e
}
