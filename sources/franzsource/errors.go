package franzsource

import (
	"fmt"

	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/onceq/onceq/sources/internal/kafkacore"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// The errors this source returns are package kafkagroup's, the same values
// for both Kafka sources.

// invalidOption is New's error for a setting only this source takes: it
// wraps kafkagroup.ErrInvalidConfig.
func invalidOption(format string, args ...any) error {
	return fmt.Errorf("franzsource: %w: %s", kafkagroup.ErrInvalidConfig, fmt.Sprintf(format, args...))
}

// errRejoining wraps a commit that was never sent: the member was joining
// the group again (a rebalance under way) until the commit's time ran out.
var errRejoining = errors.New("franzsource: the member was rejoining the group; the commit was not sent")

// groupMovedOn reports whether every failure in err is the group refusing
// a commit because this member, or its generation, is no longer part of
// it: a member the group dropped, a rebalance under way or done (this
// member still rejoining when the commit's time ran out), a stale member
// epoch (KIP-848).
func groupMovedOn(err error) bool {
	return kafkacore.GroupMovedOn(err,
		kerr.UnknownMemberID, kerr.RebalanceInProgress, kerr.IllegalGeneration, kerr.StaleMemberEpoch, kerr.FencedMemberEpoch, errRejoining)
}
