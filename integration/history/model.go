package history

import (
	"fmt"
	"slices"

	"github.com/anishathalye/porcupine"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
)

// state is one key's record in the model. Expiry is in Unix nanoseconds.
type state struct {
	present bool
	status  dedup.Status
	version int64
	owner   string
	expires int64
}

func (s state) String() string {
	if !s.present {
		return "absent"
	}
	return fmt.Sprintf("%s v%d owner %s", s.status, s.version, s.owner)
}

// matches reports whether a record a Store returned is s. Expiries are not
// compared: a Store may keep them rounded (DynamoDB keeps whole seconds).
func (s state) matches(r *storehistory.Record) bool {
	return r != nil && s.present && s.status == r.Status && s.version == r.Version && (r.Owner == "" || r.Owner == s.owner)
}

// holds reports whether the lease (owner, version) of call in still fences s.
func (s state) holds(in storehistory.Event) bool {
	return s.present && s.status == dedup.StatusPending && s.owner == in.Owner && s.version == in.Version
}

// newModel is the record's sequential specification, nondeterministic where
// a call's outcome is unknown (taken effect or not).
//
// It is relaxed where Stores legitimately differ, so that it accepts every
// correct Store: a claim is allowed whenever its Now is past the expiry
// asked for (a Store may keep expiries rounded up and count a clock skew
// margin, and so refuse a little longer); a refused claim is never faulted
// for the time (only for the record it reports); a record whose expiry has
// passed may have been removed by TTL (a PENDING one whose lease ran out
// included), after which a late Complete or Fail finds nothing and the
// next claim starts at version 1.
//
// resets is how many resets an operator's tool made to the key outside
// the history (Options.Resets): before each call, the record may have
// been reset up to that many times.
func newModel(resets int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{state{}} },
		Step: func(st, input, output any) []any {
			var next []state
			for _, s := range resetChain(st.(state), resets) {
				for _, n := range step(s, input.(storehistory.Event), output.(storehistory.Event)) {
					if !slices.Contains(next, n) {
						next = append(next, n)
					}
				}
			}
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output any) string {
			return describe(input.(storehistory.Event), output.(storehistory.Event))
		},
		DescribeState: func(st any) string { return st.(state).String() },
	}
	return nm.ToModel()
}

// step returns every state the record can be in after call in returned
// out from s; none when it cannot have returned out.
//
// A record whose expiry had passed when the call returned may have been
// removed by TTL before the call took effect: the call may also have met
// no record at all. Only a call with a known outcome gives a time to
// judge by; a call whose outcome is unknown has no return, and the
// removal can be placed before the next call that has one.
func step(s state, in, out storehistory.Event) []state {
	next := apply(s, in, out)
	if s.present && !unknown(out) && s.expires < out.Time {
		for _, r := range apply(state{}, in, out) {
			if !slices.Contains(next, r) {
				next = append(next, r)
			}
		}
	}
	return next
}

// unknown reports whether out leaves open whether its call took effect:
// an error that says nothing, or no return at all.
func unknown(out storehistory.Event) bool {
	return out.Outcome == storehistory.OutcomeUnknown || out.Kind == ""
}

// apply is step without TTL: the states after call in returned out from s.
func apply(s state, in, out storehistory.Event) []state {
	open := unknown(out)
	switch in.Op {
	case storehistory.OpClaim, storehistory.OpClaimComplete:
		written := dedup.StatusPending
		if in.Op == storehistory.OpClaimComplete {
			written = dedup.StatusCompleted
		}
		claimable := !s.present || in.Now > s.expires
		switch {
		case open:
			next := []state{s}
			if claimable {
				for _, v := range claimVersions(s) {
					next = append(next, state{true, written, v, in.Owner, in.Until})
				}
			}
			return next
		case out.Outcome != storehistory.OutcomeOK:
			return []state{s} // refused or failed: nothing written
		case !out.Acquired:
			if s.matches(out.Record) {
				return []state{s}
			}
			return nil
		}
		r := out.Record
		if !claimable || r == nil || r.Owner != in.Owner {
			return nil
		}
		if p := out.Previous; p != nil {
			// It replaced an expired record it saw: that one, one version on.
			if !s.matches(p) || r.Version != s.version+1 {
				return nil
			}
		} else if !contains(claimVersions(s), r.Version) {
			return nil
		}
		return []state{{true, written, r.Version, in.Owner, in.Until}}

	case storehistory.OpComplete, storehistory.OpFail:
		settled := dedup.StatusCompleted
		if in.Op == storehistory.OpFail {
			settled = dedup.StatusFailed
			if in.DeadLetter {
				settled = dedup.StatusDeadLetter
			}
		}
		next := state{true, settled, in.Version + 1, in.Owner, in.Until}
		held := s.holds(in)
		switch out.Outcome {
		case storehistory.OutcomeOK:
			switch {
			case held:
				return []state{next}
			case s.present && s.status == settled && s.version == in.Version+1 && s.owner == in.Owner:
				// A retry inside one call that recognised its own earlier
				// try, committed with its answer lost.
				return []state{s}
			}
			return nil
		case storehistory.OutcomeFail:
			if held {
				return nil // the lease was still held: it was not lost
			}
			return []state{s}
		case storehistory.OutcomeRefused:
			return []state{s}
		}
		if held {
			return []state{s, next}
		}
		return []state{s}

	case storehistory.OpExtend:
		held := s.holds(in)
		next := s
		next.expires = max(s.expires, in.Until)
		switch out.Outcome {
		case storehistory.OutcomeOK:
			if held {
				return []state{next}
			}
			return nil
		case storehistory.OutcomeFail:
			if held {
				return nil
			}
			return []state{s}
		}
		if held {
			return []state{s, next}
		}
		return []state{s}

	case storehistory.OpGet:
		switch {
		case open:
			return []state{s}
		case out.Outcome == storehistory.OutcomeOK:
			if s.matches(out.Record) {
				return []state{s}
			}
			return nil
		case !s.present:
			return []state{s}
		}
		return nil // a read of nothing while the record was live
	}
	return []state{s} // an operation the model does not know changes nothing it sees
}

// resetChain is s and the records up to n resets (dedup.Resetter) make of
// it: a FAILED, DEAD_LETTER or PENDING record becomes FAILED one version
// on, claimable at once (the model has no time of the reset to judge a
// PENDING lease's expiry by: the reset itself refuses a live one).
func resetChain(s state, n int) []state {
	out := []state{s}
	for range n {
		if !s.present || s.status == dedup.StatusCompleted {
			break
		}
		s = state{true, dedup.StatusFailed, s.version + 1, s.owner, 0}
		out = append(out, s)
	}
	return out
}

// claimVersions are the versions a claim that takes s may write: the
// first for an absent record, one on for an expired one, or the first
// again if TTL removed it meanwhile.
func claimVersions(s state) []int64 {
	if !s.present {
		return []int64{1}
	}
	return []int64{s.version + 1, 1}
}

func contains(vs []int64, v int64) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// describe renders one call and its outcome for a violation's text.
func describe(in, out storehistory.Event) string {
	var call string
	switch in.Op {
	case storehistory.OpClaim, storehistory.OpClaimComplete:
		call = fmt.Sprintf("%s(owner %s)", in.Op, in.Owner)
	case storehistory.OpGet:
		call = "get"
	default:
		call = fmt.Sprintf("%s(owner %s, v%d)", in.Op, in.Owner, in.Version)
	}
	switch {
	case out.Kind == "":
		return call + " → no return (process ended)"
	case out.Outcome == storehistory.OutcomeUnknown:
		return call + " → unknown"
	case out.Outcome != storehistory.OutcomeOK:
		return call + " → " + out.Outcome
	case in.Op == storehistory.OpClaim || in.Op == storehistory.OpClaimComplete:
		if out.Acquired {
			return fmt.Sprintf("%s → acquired v%d", call, out.Record.Version)
		}
		return fmt.Sprintf("%s → held: %s v%d owner %s", call, out.Record.Status, out.Record.Version, out.Record.Owner)
	case in.Op == storehistory.OpGet:
		return fmt.Sprintf("get → %s v%d owner %s", out.Record.Status, out.Record.Version, out.Record.Owner)
	}
	return call + " → ok"
}
