package sqssource_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/outbox/outboxtest"
	"github.com/onceq/onceq/sources/sqssource"
)

// proxied is a Sender whose calls go through a fault proxy in front of
// the emulator, and a client that goes to the emulator directly.
func proxied(t *testing.T) (*sqssource.Sender, *faultproxy.Proxy, *awssqs.Client) {
	t.Helper()
	direct := client(t)
	p := faultproxy.Start(t, testenv.SQSEndpoint(t))
	cfg := awstest.Config(t, p.URL())
	s, err := sqssource.NewSender(awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(p.URL()) }))
	if err != nil {
		t.Fatal(err)
	}
	return s, p, direct
}

// checkRefused fails t unless errs refuse exactly the entries refused and
// take the rest.
func checkRefused(t *testing.T, errs []error, refused ...int) {
	t.Helper()
	for i, err := range errs {
		var re *outbox.RefusedError
		switch want := slices.Contains(refused, i); {
		case want && !errors.As(err, &re):
			t.Errorf("entry %d: %v, want an *outbox.RefusedError", i, err)
		case !want && err != nil:
			t.Errorf("entry %d: %v, want it taken", i, err)
		}
	}
}

// SQS refuses some inputs for a whole SendMessageBatch call
// (InvalidMessageContents for a character it does not take, as the
// emulator does not: the proxy answers as SQS does, for any call that
// carries the entry). The Sender sends each entry of that call alone:
// only the entry at fault is refused, the other nine reach the queue.
func TestSenderIsolatesABatchWideRefusal(t *testing.T) {
	t.Parallel()
	s, p, c := proxied(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	p.AddRule(faultproxy.Rule{Op: "SendMessageBatch", Body: func(b []byte) bool { return bytes.Contains(b, []byte("poisoned")) },
		Fault: faultproxy.Refuse, Code: "InvalidMessageContents",
		Message: "Invalid binary character '#x0' was found in the message body, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"})
	entries := outboxtest.Entries(url, "isolate", 10, 10)
	entries[3].Body = []byte(`{"poisoned":true}`)
	errs := s.Send(testenv.Context(t, time.Minute), entries)
	checkRefused(t, errs, 3)
	if vis, _ := depth(t, c, url); vis != 9 {
		t.Errorf("%d messages on the queue, want the 9 not at fault", vis)
	}
	if n := p.Requests("SendMessageBatch"); n != 11 {
		t.Errorf("%d SendMessageBatch calls, want 11: the batch, then each entry alone", n)
	}
}

// A queue that does not exist refuses every entry at once: nothing is
// sent again alone.
func TestSenderMissingQueueRefusesTheBatchOnce(t *testing.T) {
	t.Parallel()
	s, p, c := proxied(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	entries := outboxtest.Entries(strings.TrimSuffix(url, "/")+"-missing", "missing", 10, 10)
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), entries), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9)
	if n := p.Requests("SendMessageBatch"); n > 1 {
		t.Errorf("%d SendMessageBatch calls, want at most one", n)
	}
}

// The size bound is the queue's own MaximumMessageSize (read once, and
// again when an entry exceeds it, in case it was raised), not a
// constant: an entry over it is refused before any call carries it, and
// a queue that takes messages over 256 KiB takes calls of up to 1 MiB.
func TestSenderBoundsByTheQueuesMaximumMessageSize(t *testing.T) {
	t.Parallel()
	s, p, c := proxied(t)
	small, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second, maxSize: 2048})
	// Counts the calls that carry the large body, and forwards them.
	p.AddRule(faultproxy.Rule{Body: func(b []byte) bool { return bytes.Contains(b, []byte("LARGE")) }, Fault: faultproxy.None})

	entries := outboxtest.Entries(small, "bound", 3, 3)
	entries[1].Body = append([]byte("LARGE"), bytes.Repeat([]byte("x"), 3000)...)
	errs := s.Send(testenv.Context(t, time.Minute), entries)
	checkRefused(t, errs, 1)
	if err := errs[1]; err == nil || !strings.Contains(err.Error(), "MaximumMessageSize of 2048") {
		t.Errorf("the large entry: %v, want a refusal that names the queue's MaximumMessageSize", err)
	}
	if n := p.Injected(faultproxy.None); n != 0 {
		t.Errorf("%d calls carried the large entry, want none", n)
	}
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), outboxtest.Entries(small, "bound-again", 2, 2)))
	if n := p.Requests("GetQueueAttributes"); n != 1 {
		t.Errorf("%d GetQueueAttributes calls, want 1: the bound is read once", n)
	}

	// Raised: the entry is read against the new bound, and sent.
	if _, err := c.SetQueueAttributes(context.Background(), &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(small),
		Attributes: map[string]string{string(types.QueueAttributeNameMaximumMessageSize): "4096"}}); err != nil {
		t.Fatal(err)
	}
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), entries[1:2]))

	// A queue of 1 MiB (the emulator's default) takes ten entries of 60
	// KiB, more than 256 KiB together, in one call.
	large, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	entries = outboxtest.Entries(large, "wide", 10, 10)
	for i := range entries {
		entries[i].Body = bytes.Repeat([]byte("y"), 60<<10)
	}
	p.ResetStats()
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), entries))
	if n := p.Requests("SendMessageBatch"); n != 1 {
		t.Errorf("%d SendMessageBatch calls for 600 KiB to a queue of 1 MiB, want 1", n)
	}
	if vis, _ := depth(t, c, large); vis != 10 {
		t.Errorf("%d messages on the queue, want 10", vis)
	}
}

// What SQS never takes (an empty body, characters outside those it
// allows, an empty or reserved attribute, more than ten attributes, a
// Destination that is no queue URL) is refused before it is sent, which
// the emulator would take (or refuse for the whole call, as SQS may):
// the entry beside it is taken.
func TestSenderRefusesWhatSQSNeverTakes(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	many := map[string]string{}
	for i := range 10 {
		many["h"+strconv.Itoa(i)] = "v"
	}
	for name, spoil := range map[string]func(e *outbox.Entry){
		"empty body":         func(e *outbox.Entry) { e.Body = nil },
		"body not UTF-8":     func(e *outbox.Entry) { e.Body = []byte{'a', 0xff} },
		"escape in the body": func(e *outbox.Entry) { e.Body = []byte("a\x1bb") },
		"U+FFFE in the body": func(e *outbox.Entry) { e.Body = []byte("a\uFFFEb") },
		"empty header":       func(e *outbox.Entry) { e.Headers = map[string]string{"event-type": ""} },
		"reserved header":    func(e *outbox.Entry) { e.Headers = map[string]string{"AWS.trace": "x"} },
		"header name":        func(e *outbox.Entry) { e.Headers = map[string]string{"event type": "x"} },
		"header dots":        func(e *outbox.Entry) { e.Headers = map[string]string{"a..b": "x"} },
		"eleven attributes":  func(e *outbox.Entry) { e.Headers = many },
		"not a queue URL":    func(e *outbox.Entry) { e.Destination = "https://sqs.eu-west-1.amazonaws.com/123456789012/" },
	} {
		t.Run(name, func(t *testing.T) {
			entries := outboxtest.Entries(url, "never-"+strings.ReplaceAll(name, " ", "-"), 2, 2)
			spoil(&entries[1])
			checkRefused(t, newSender(t).Send(testenv.Context(t, time.Minute), entries), 1)
		})
	}
	// The edges SQS takes: a character beyond U+FFFF, ten attributes.
	entries := outboxtest.Entries(url, "edges", 2, 2)
	entries[0].Body = []byte("🙂")
	delete(many, "h0")
	entries[1].Headers = many
	errs := newSender(t).Send(testenv.Context(t, time.Minute), entries)
	for i, err := range errs {
		if err != nil && errors.Is(err, outbox.ErrRefused) && !strings.Contains(err.Error(), "InvalidMessageContents") {
			t.Errorf("entry %d: %v, refused by the Sender, want it sent", i, err)
		}
	}
}

// On a FIFO queue an OrderingKey SQS does not take as a group (longer
// than 128 characters, or other than ASCII letters, digits and
// punctuation) is sent as its SHA-256: the same key, the same group.
func TestSenderFIFOGroupOfAKeySQSRefuses(t *testing.T) {
	t.Parallel()
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{fifo: true, visibility: 30 * time.Second})
	entries := outboxtest.Entries(url, "group", 2, 2)
	entries[0].OrderingKey = "café au lait"
	entries[1].OrderingKey = strings.Repeat("k", 129)
	checkRefused(t, newSender(t).Send(testenv.Context(t, time.Minute), entries))
	msgs, err := readAll(context.Background(), c, url, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, e := range entries {
		sum := sha256.Sum256([]byte(e.OrderingKey))
		want[hex.EncodeToString(sum[:])] = true
	}
	for _, m := range msgs {
		if g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]; !want[g] {
			t.Errorf("group %q, want the SHA-256 of the OrderingKey", g)
		}
	}
	if len(msgs) != 2 {
		t.Errorf("%d messages, want 2", len(msgs))
	}
}

// Without the permission to read the queue's MaximumMessageSize the
// Sender bounds by SQS's maximum and leaves the queue's bound to SQS (the
// entry over it is refused all the same, by SQS), and does not ask again
// on each call.
func TestSenderWithoutGetQueueAttributes(t *testing.T) {
	t.Parallel()
	s, p, c := proxied(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second, maxSize: 2048})
	p.AddRule(faultproxy.Rule{Op: "GetQueueAttributes", Fault: faultproxy.AccessDenied})
	entries := outboxtest.Entries(url, "denied", 2, 2)
	entries[1].Body = bytes.Repeat([]byte("x"), 3000)
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), entries), 1)
	checkRefused(t, s.Send(testenv.Context(t, time.Minute), outboxtest.Entries(url, "denied-again", 2, 2)))
	if n := p.Requests("GetQueueAttributes"); n != 1 {
		t.Errorf("%d GetQueueAttributes calls, want 1", n)
	}
	if vis, _ := depth(t, c, url); vis != 3 {
		t.Errorf("%d messages on the queue, want 3", vis)
	}
}
