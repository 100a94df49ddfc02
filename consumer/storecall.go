package consumer

import (
	"context"
	"errors"
	"time"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/retry"
	"go.opentelemetry.io/otel/trace"
)

// settleTimeout bounds the store calls that settle a record, which run on
// a context the caller's cancellation does not reach, so that a drain can
// still record its work.
const settleTimeout = 10 * time.Second

// storeCall runs one store call under its own context, span and metrics.
func (a *attempt) storeCall(op storeOp, call func(ctx context.Context) error) error {
	start := time.Now()
	ctx, cancel := a.storeCtx(start)
	defer cancel()
	mon := a.g.obs.mon
	mon.storeCallBegins(start)
	ctx, span := a.g.obs.tel.beginStore(ctx, op)
	err := call(ctx)
	a.g.obs.tel.endStore(ctx, span, op, start, err)
	mon.storeCallEnds(time.Now())
	mon.storeCalled(err, start)
	return err
}

// storeCtx is the context of one store call, made as it starts (now): it
// outlives the caller's cancellation (a drain can still record its work)
// and ends settleTimeout later.
func (a *attempt) storeCtx(now time.Time) (context.Context, context.CancelFunc) {
	var ctx context.Context
	cancel := func() {}
	if a.run != nil {
		ctx = a.run.stores.get(now)
	} else {
		ctx, cancel = context.WithTimeout(context.WithoutCancel(a.ctx), settleTimeout)
	}
	if a.span.IsRecording() {
		ctx = trace.ContextWithSpan(ctx, a.span)
	}
	return ctx, cancel
}

type fault int

const (
	outage       fault = iota // transient: hold the message, spend nothing
	messageFault              // the message's own: dead-letter it
	configFault               // the deployment's: stop, blame no message
	decided                   // not a fault: a fence or a condition said no
)

// faultOf says whose fault a store error is: the one place the consumer
// decides it.
func faultOf(err error) fault {
	switch {
	case errors.Is(err, dedup.ErrLeaseLost), businessError(err) != nil:
		return decided
	case errors.Is(err, errors.ErrUnsupported):
		// A call the Store's Capabilities declare and the Store does not
		// make (ClaimComplete behind a wrapper that claims it): no retry
		// mends it.
		return configFault
	case errors.Is(err, dedup.ErrUnsupportedWrite):
		// A write the Store does not commit got past the Guard's kind
		// check (a type that borrows the Store's kind, a wrapper whose
		// Capabilities say more than the Store behind commits): a handler
		// built for another Store, which every message meets alike, as a
		// *WriteTypeError is.
		return configFault
	case errors.Is(err, dedup.ErrRecordTooLarge), errors.Is(err, dedup.ErrTooManyWrites),
		errors.Is(err, dedup.ErrEmptyKey),
		errors.Is(err, dedup.ErrResponseTooLarge), errors.Is(err, dedup.ErrNilWrite):
		return messageFault
	}
	switch retry.Classify(err) {
	case retry.Misconfigured:
		return configFault
	case retry.Permanent:
		return messageFault // a request built from the message is invalid
	}
	return outage
}

// businessError is err's *dedup.BusinessConditionError, if any.
func businessError(err error) *dedup.BusinessConditionError {
	if err == nil {
		return nil // the errors.As target escapes: made only when needed
	}
	var be *dedup.BusinessConditionError
	if errors.As(err, &be) {
		return be
	}
	return nil
}
