package sharesource_test

import (
	"errors"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/franzsource/sharesource"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// New reads the group's lock and delivery-count limit from the broker and
// refuses a limit the consumer's attempts do not fit in.
func TestDeliveryCountLimitChecked(t *testing.T) {
	t.Parallel()
	addr := cluster(t) // limit 10, lock 4s
	topic := topicName(t, "in")
	createTopic(t, addr, topic, 1)
	ctx := testenv.Context(t, 30*time.Second)
	// 5 attempts and a 60s lease: up to 5 + 2 × 15 deliveries.
	_, err := sharesource.New(ctx, []string{addr}, topicName(t, "g1"), []string{topic}, sharesource.CheckAttempts(5, time.Minute))
	var le *sharesource.DeliveryLimitError
	if !errors.As(err, &le) || !errors.Is(err, kafkagroup.ErrInvalidConfig) {
		t.Fatalf("New: %v, want a DeliveryLimitError wrapping ErrInvalidConfig", err)
	}
	if le.Limit != 10 || le.Need != 35 {
		t.Fatalf("limit %d, need %d: want 10 and 35", le.Limit, le.Need)
	}
	// 3 attempts and a lease of one lock: 3 + 2 fit.
	src := newSource(t, addr, topicName(t, "g2"), topic, sharesource.CheckAttempts(3, testLock))
	if src.Lock() != testLock || src.DeliveryCountLimit() != 10 {
		t.Fatalf("lock %v, limit %d: want the broker's %v and 10", src.Lock(), src.DeliveryCountLimit(), testLock)
	}
	if got := src.Capabilities().DeliveryTimeout; got != testLock/2 {
		t.Fatalf("DeliveryTimeout %v, want half the lock", got)
	}
}
