package sqssource

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
)

// handle is what the source keeps of a delivery in broker.Message.Handle.
type handle struct {
	queueURL string
	receipt  string
	// receivedAt is when the ReceiveMessage call started: SQS's 12-hour
	// visibility ceiling counts from about then, and erring early is safe.
	receivedAt time.Time
	sentAt     time.Time
	groupID    string
	// attrs are the message attributes as SQS gave them, binary ones
	// included, so a dead-lettered copy keeps their types.
	attrs map[string]types.MessageAttributeValue
}

// SentTime is when SQS accepted the message (its SentTimestamp), and
// whether m is a message of this package that carried one.
func SentTime(m *broker.Message) (time.Time, bool) {
	h, ok := m.Handle.(*handle)
	if !ok || h.sentAt.IsZero() {
		return time.Time{}, false
	}
	return h.sentAt, true
}

func (s *Source) convert(in []types.Message, started time.Time) []*broker.Message {
	if len(in) == 0 {
		return nil
	}
	now := time.Now()
	out := make([]*broker.Message, 0, len(in))
	for _, m := range in {
		out = append(out, s.toMessage(m, started, now))
	}
	return out
}

func (s *Source) toMessage(m types.Message, started, now time.Time) *broker.Message {
	sys := m.Attributes
	h := &handle{
		queueURL:   s.queueURL,
		receipt:    aws.ToString(m.ReceiptHandle),
		receivedAt: started,
		groupID:    sys[string(types.MessageSystemAttributeNameMessageGroupId)],
		attrs:      m.MessageAttributes,
	}
	if ms, err := strconv.ParseInt(sys[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		h.sentAt = time.UnixMilli(ms)
	}
	attempt, err := strconv.Atoi(sys[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil || attempt < 1 {
		attempt = 1
	}
	msg := &broker.Message{
		ID:         aws.ToString(m.MessageId),
		Body:       []byte(aws.ToString(m.Body)),
		Attributes: stringAttributes(m.MessageAttributes),
		Deliveries: attempt,
		Origin:     broker.Origin{System: System, Destination: s.queueName},
		ReceivedAt: now,
		Handle:     h,
	}
	if s.fifo {
		msg.OrderingKey = h.groupID
	}
	return msg
}

// stringAttributes keeps the String and Number attributes (and their custom
// subtypes such as "Number.int"). Binary ones are left out: a base64 text
// would be indistinguishable from a string attribute that happens to look
// like one.
func stringAttributes(in map[string]types.MessageAttributeValue) map[string]string {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]string, len(in))
	for k, v := range in {
		dt := aws.ToString(v.DataType)
		if (strings.HasPrefix(dt, "String") || strings.HasPrefix(dt, "Number")) && v.StringValue != nil {
			out[k] = *v.StringValue
		}
	}
	return out
}

func (s *Source) handleOf(m *broker.Message) (*handle, error) {
	if m == nil {
		return nil, ErrForeignMessage
	}
	h, ok := m.Handle.(*handle)
	if !ok || h.queueURL != s.queueURL {
		return nil, ErrForeignMessage
	}
	return h, nil
}
