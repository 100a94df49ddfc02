package kafkacore

import (
	"fmt"
	"strconv"

	"github.com/onceq/onceq/outbox"
)

// maxTopicLen is the longest topic name Kafka allows.
const maxTopicLen = 249

// Refusal is the *outbox.RefusedError a Kafka Sender answers for an entry
// no topic can take: one no destination takes (outbox.Refusal), or whose
// Destination is not a topic name Kafka allows (1 to 249 ASCII letters,
// digits, '.', '_' and '-', neither "." nor ".."). nil otherwise. Such an
// entry never reaches the client, which would fail it as of the moment
// (an empty topic) or ask the cluster for it again and again.
func Refusal(e *outbox.Entry) error {
	if err := outbox.Refusal(e); err != nil {
		return err
	}
	if reason := topicProblem(e.Destination); reason != "" {
		return &outbox.RefusedError{Destination: e.Destination, Reason: reason}
	}
	return nil
}

// topicProblem says why name is no Kafka topic name, or "".
func topicProblem(name string) string {
	switch {
	case len(name) > maxTopicLen:
		return fmt.Sprintf("not a Kafka topic name: %d characters, more than Kafka's %d", len(name), maxTopicLen)
	case name == "." || name == "..":
		return "not a Kafka topic name: " + strconv.Quote(name)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "not a Kafka topic name: it holds " + strconv.QuoteRuneToASCII(c) + "; Kafka takes ASCII letters, digits, '.', '_' and '-'"
		}
	}
	return ""
}
