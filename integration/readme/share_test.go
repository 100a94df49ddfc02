package readme

import "testing"

// TestKafkaShareGroupsWalkthrough runs docs/kafka-share-groups.md from its
// text, as TestKafkaPostgresWalkthrough runs its page: a share-group
// worker on PostgreSQL, killed with SIGKILL in the middle of a batch and
// restarted, every order counted once.
func TestKafkaShareGroupsWalkthrough(t *testing.T) {
	s, firstCheck := runWalkthrough(t, "../../docs/kafka-share-groups.md")
	if firstCheck == 0 {
		t.Error("the page checks no order")
	}
	if runs := s.logCount("order_id=o-1 "); runs != 1 {
		t.Errorf("the handler recorded order o-1 %d times, want once", runs)
	}
}
