package broker

import "time"

// ReceivesNeeded is the lowest number of receives of one message that lets
// a worker spend all of maxAttempts before a broker's own redelivery
// limit (an SQS redrive policy's maxReceiveCount) moves it on, with no
// reason:
//
//	maxAttempts + 2 × ceil(leaseTTL / visibility)
//
// Each failed handler run costs one receive: its retry is scheduled for
// when the FAILED record can be claimed (dedup.ClaimableAt of its
// expiry), so the next receive runs the handler. A message whose key is
// leased by another worker (one that crashed holds it for up to leaseTTL)
// waits that lease out; out of sight for at most one visibility timeout at
// a time, it spans ceil(leaseTTL / visibility) visibility periods, and each
// can cost two receives: one that finds the key held, one as the wait ends.
func ReceivesNeeded(maxAttempts int, leaseTTL, visibility time.Duration) int {
	if visibility <= 0 {
		return maxAttempts
	}
	waits := int((leaseTTL + visibility - 1) / visibility)
	return maxAttempts + 2*waits
}
