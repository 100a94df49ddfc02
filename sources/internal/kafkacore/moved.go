package kafkacore

import "github.com/onceq/onceq/sources/kafkagroup"

// GroupMovedOn reports whether every failure in err is the group refusing
// a commit because this member, or its generation, is no longer part of it
// (one of moved: a member the group dropped, a rebalance under way or done,
// a stale member epoch), wrapped or not in kafkagroup.ErrCommitFailed.
// What such a commit held is redone by the partition's
// next owner, so a stop that meets it is clean.
func GroupMovedOn(err error, moved ...error) bool {
	found := false
	var walk func(error) bool
	walk = func(err error) bool {
		if err == kafkagroup.ErrCommitFailed {
			return true
		}
		for _, m := range moved {
			if err == m {
				found = true
				return true
			}
		}
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				if !walk(x) {
					return false
				}
			}
			return true
		case interface{ Unwrap() error }:
			return walk(e.Unwrap())
		}
		return false
	}
	return walk(err) && found
}
