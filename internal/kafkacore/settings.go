package kafkacore

import (
	"fmt"
	"time"

	"github.com/onceq/onceq/broker"
)

// CheckSettings checks the settings both Kafka sources take; rebalance is
// the group's rebalance timeout, which a revoke's drain must stay below.
// The error names the option; the source wraps it in its ErrInvalidConfig.
func CheckSettings(ordering broker.Ordering, maxInFlight int, commitInterval, revokeTimeout, rebalance time.Duration) error {
	switch {
	case ordering != broker.OrderByKey && ordering != broker.OrderByPartition && ordering != broker.Unordered:
		return fmt.Errorf("option Ordering %d: unknown", ordering)
	case maxInFlight < 1:
		return fmt.Errorf("option MaxInFlightPerPartition %d: must be at least 1", maxInFlight)
	case commitInterval <= 0:
		return fmt.Errorf("option CommitInterval %v: must be positive", commitInterval)
	case revokeTimeout <= 0:
		return fmt.Errorf("option RevokeTimeout %v: must be positive", revokeTimeout)
	case revokeTimeout >= rebalance:
		return fmt.Errorf("option RevokeTimeout %v: must be shorter than the rebalance timeout %v, or the group drops this member while it drains",
			revokeTimeout, rebalance)
	}
	return nil
}
