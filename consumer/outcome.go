package consumer

import "time"

// Kind is what became of a message: Processed, Duplicate,
// InFlightElsewhere, Retrying, DeadLettered, LeaseLost, KeyReuse, Rejected,
// StoreUnavailable or Misconfigured (each documented at its constant;
// Kinds lists them). Its String is the name used in metrics and logs
// ("processed", "key_reuse", ...).
type Kind int

// The outcomes. Each ends in one source action; see Kind.Action.
const (
	// Processed: the handler ran and its result committed as COMPLETED.
	Processed Kind = iota + 1
	// Duplicate: the key was already COMPLETED; its cached response stands.
	Duplicate
	// InFlightElsewhere: another worker holds the key's lease; the message
	// comes back when that lease can have ended, never acked meanwhile.
	InFlightElsewhere
	// Retrying: the handler failed, or an earlier attempt did and its
	// retry delay has not passed; the message comes back.
	Retrying
	// DeadLettered: permanent failure, bad input or MaxAttempts reached.
	DeadLettered
	// LeaseLost: the lease was taken over while the handler ran; nothing
	// was committed by this worker and the message is not acked.
	LeaseLost
	// KeyReuse: the key is held by a different payload.
	KeyReuse
	// Rejected: a business condition refused the effect; the refusal is
	// cached as COMPLETED so duplicates get the same answer.
	Rejected
	// StoreUnavailable: the store could not be reached, shed load beyond
	// its retries, or could not record the result. An outage is never the
	// message's fault: it is held and comes back, and no attempt is spent.
	StoreUnavailable
	// Misconfigured: the store refused for a reason of the deployment (a
	// missing table, denied access, a clock too far off); Err wraps
	// ErrMisconfigured. The message is given back untouched; a Consumer
	// stops with that error. A Guard's caller should stop too.
	Misconfigured
)

// Kinds lists every outcome, in order.
func Kinds() []Kind {
	ks := make([]Kind, 0, len(kindNames)-1)
	for k := Processed; int(k) < len(kindNames); k++ {
		ks = append(ks, k)
	}
	return ks
}

// numKinds bounds the kinds, for arrays indexed by kind.
const numKinds = len(kindNames)

var kindNames = [...]string{"", "processed", "duplicate", "in_flight_elsewhere", "retrying", "dead_lettered", "lease_lost", "key_reuse", "rejected",
	"store_unavailable", "misconfigured"}

func (k Kind) String() string { return nameOf(kindNames[:], int(k)) }

// nameOf is names[i], or "unknown" for a value out of range.
func nameOf(names []string, i int) string {
	if i > 0 && i < len(names) {
		return names[i]
	}
	return "unknown"
}

// Action is what the source is told to do with a message: Ack, Retry or
// DeadLetter. Outcome.Action gives it for an outcome.
type Action int

var actionNames = [...]string{"", "ack", "retry", "dead_letter"}

// numActions bounds the actions, for arrays indexed by action.
const numActions = len(actionNames)

func (a Action) String() string { return nameOf(actionNames[:], int(a)) }

const (
	// Ack settles the message: its record is COMPLETED.
	Ack Action = iota + 1
	// Retry gives the message back (or holds it in place) for RetryAfter.
	Retry
	// DeadLetter moves the message to the dead-letter destination.
	DeadLetter
)

// Action maps an outcome to what the source must do.
func (k Kind) Action() Action {
	switch k {
	case Processed, Duplicate, Rejected:
		return Ack
	case DeadLettered, KeyReuse:
		return DeadLetter
	default:
		return Retry
	}
}

// Outcome is the result of running one message through the guard.
type Outcome struct {
	Kind Kind
	// IdempotencyKey is the idempotency key claimed (namespace#fingerprint),
	// as Message.IdempotencyKey.
	IdempotencyKey string
	// Attempt is the attempt number of the claim this processing won, as
	// the store counts it (dedup.Claim.Attempt: the key's failed handler
	// runs plus one), in either store mode; 0 when it won none (a
	// duplicate, a key held elsewhere, a message that failed before its
	// claim: in one-round-trip mode a handler error comes before the
	// claim). Message.Deliveries counts deliveries instead.
	Attempt int
	// Response is the committed or cached response.
	Response []byte
	// Archived marks a Duplicate whose record TTL had removed, found in the
	// store's archive of completions (dedup.Claim.Archived): its response
	// is no longer kept, so Response is empty.
	Archived bool
	// Err is the cause of every outcome but Processed and Duplicate (and
	// Rejected by its own rule). Its text never holds the key.
	Err error
	// RetryAfter is the delay before the message should be seen again.
	RetryAfter time.Duration
}

// Action is Kind.Action.
func (o Outcome) Action() Action { return o.Kind.Action() }

// Reason is the dead-letter reason: the cause's text.
func (o Outcome) Reason() string {
	if o.Err == nil {
		return o.Kind.String()
	}
	return o.Err.Error()
}
