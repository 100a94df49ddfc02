package sqssource

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/outbox"
	"github.com/onceq/onceq/retry"
)

// SQS's bounds on one SendMessageBatch call.
const (
	sendBatchMax = 10
	// sqsMaxMessage is the largest message SQS takes, and the largest
	// batch (1 MiB since August 2025): the bound on a queue whose own
	// MaximumMessageSize cannot be read.
	sqsMaxMessage = 1 << 20
	// legacyMaxMessage is SQS's bound on a message and a call before
	// August 2025, which every region and emulator takes. A queue whose
	// MaximumMessageSize exceeds it is in a region that takes calls of
	// sqsMaxMessage; the calls to any other stay within this.
	legacyMaxMessage = 256 << 10
	// sendCalls bounds the SendMessageBatch calls of one Send in flight:
	// ten, so that a relay's default batch (outbox.DefaultBatchSize, 100
	// entries) goes out in one wave of calls rather than in two.
	sendCalls = 10
)

// Sender is an outbox.Sender to SQS: each entry's Destination is a queue
// URL. It sends with SendMessageBatch, ten entries a call, several calls
// at once: together at most 1 MiB a call to a queue that takes messages
// over 256 KiB, 256 KiB to any other (a call SQS still finds too long is
// split).
//
// Each message carries the entry's ID as its idempotency-key message
// attribute, which an onceq consumer of the queue takes as the message's
// key, so that a re-dispatched copy is a duplicate there; the entry's
// Headers are String attributes beside it. On a FIFO queue (a URL ending
// in .fifo) the MessageGroupId is the entry's OrderingKey (its SHA-256
// when SQS would not take it as a group: longer than 128 characters, or
// other than ASCII letters, digits and punctuation; its ID's hash when it
// has none) and the MessageDeduplicationId the SHA-256 of its ID, so that
// SQS itself drops a copy sent within its five-minute window.
//
// The Sender reads each queue's MaximumMessageSize once (GetQueueAttributes;
// again when an entry exceeds it, in case it was raised) and refuses,
// without sending it, an entry larger than that (its body and
// attributes, as SQS counts them). Without the permission to read it, it
// bounds by SQS's own maximum, 1 MiB, and leaves the queue's bound to SQS.
//
// What SQS never takes is refused for good (outbox.RefusedError): a
// missing queue, a Destination that is no queue URL, a message too large,
// an empty body, a body or attribute SQS refuses (characters outside
// those it allows, more than ten attributes, an attribute name it
// reserves). SQS refuses some inputs for the whole SendMessageBatch call:
// the Sender then sends each entry of that call alone, so that only the
// entry at fault is refused. Anything else is a failure of the moment,
// sent again by the relay.
type Sender struct {
	client *awssqs.Client
	mu     sync.Mutex
	sizes  map[string]int // queue URL → its MaximumMessageSize, as last read
}

// NewSender returns a Sender over client. The client's own retryer retries
// each call; the relay retries what still fails.
func NewSender(client *awssqs.Client) (*Sender, error) {
	if client == nil {
		return nil, invalidOption("NewSender needs an SQS client")
	}
	return &Sender{client: client}, nil
}

// Send implements outbox.Sender.
func (s *Sender) Send(ctx context.Context, entries []outbox.Entry) []error {
	errs := make([]error, len(entries))
	byQueue := map[string][]int{}
	var queues []string
	for i := range entries {
		if errs[i] = refusal(&entries[i]); errs[i] != nil {
			continue
		}
		url := entries[i].Destination
		if _, ok := byQueue[url]; !ok {
			queues = append(queues, url)
		}
		byQueue[url] = append(byQueue[url], i)
	}
	var batches []sendBatch
	for _, url := range queues {
		batches = append(batches, s.queueBatches(ctx, url, entries, byQueue[url], errs)...)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, sendCalls)
	for _, batch := range batches {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			s.sendBatch(ctx, entries, batch, errs)
		})
	}
	wg.Wait()
	return errs
}

// queueBatches refuses the entries idx of queue url that exceed its
// MaximumMessageSize and groups the rest into calls SQS takes.
func (s *Sender) queueBatches(ctx context.Context, url string, entries []outbox.Entry, idx []int, errs []error) []sendBatch {
	largest := 0
	for _, i := range idx {
		largest = max(largest, entrySize(&entries[i]))
	}
	limit, err := s.maxSize(ctx, url, largest)
	if err != nil {
		for _, i := range idx {
			errs[i] = err
		}
		return nil
	}
	callBytes := legacyMaxMessage
	if limit > legacyMaxMessage {
		callBytes = sqsMaxMessage
	}
	var out []sendBatch
	size := 0
	for _, i := range idx {
		n := entrySize(&entries[i])
		if n > limit {
			errs[i] = &outbox.RefusedError{Destination: url,
				Reason: fmt.Sprintf("message too large: %d bytes (body and attributes), more than the queue's MaximumMessageSize of %d", n, limit)}
			continue
		}
		if len(out) == 0 || len(out[len(out)-1].indexes) == sendBatchMax || size+n > callBytes {
			out = append(out, sendBatch{url: url})
			size = 0
		}
		out[len(out)-1].indexes = append(out[len(out)-1].indexes, i)
		size += n
	}
	return out
}

// maxSize is queue url's MaximumMessageSize: as last read, unless it was
// never read or largest exceeds it (it may have been raised since).
func (s *Sender) maxSize(ctx context.Context, url string, largest int) (int, error) {
	s.mu.Lock()
	known, ok := s.sizes[url]
	s.mu.Unlock()
	if ok && largest <= known {
		return known, nil
	}
	out, err := s.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize}})
	switch {
	case err != nil && isMissingQueue(err):
		return 0, &outbox.RefusedError{Destination: url, Reason: "no such queue"}
	case err != nil && ctx.Err() != nil:
		return 0, fmt.Errorf("sqssource: reading the MaximumMessageSize of %s: %w", url, err)
	case err != nil && ok:
		return known, nil
	case err != nil && retry.Classify(err) != retry.Misconfigured:
		// SQS is out for the moment: SQS's own bound for this call, and
		// the queue's left to SQS, which refuses what exceeds it.
		return sqsMaxMessage, nil
	}
	// Not allowed to read it (kept, not asked again each call), or read.
	n := sqsMaxMessage
	if err == nil {
		if v, convErr := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]); convErr == nil && v > 0 {
			n = v
		}
	}
	s.mu.Lock()
	if s.sizes == nil {
		s.sizes = map[string]int{}
	}
	s.sizes[url] = n
	s.mu.Unlock()
	return n, nil
}

// sendBatch is one entry batch: the indexes into entries of one queue.
type sendBatch struct {
	url     string
	indexes []int
}

// entrySize is what SQS counts of a message against its size limits.
func entrySize(e *outbox.Entry) int {
	n := len(e.Body) + len(broker.IdempotencyKeyAttribute) + len(e.ID) + len("String")
	for k, v := range e.Headers {
		if k != broker.IdempotencyKeyAttribute {
			n += len(k) + len(v) + len("String")
		}
	}
	return n
}

func (s *Sender) sendBatch(ctx context.Context, entries []outbox.Entry, b sendBatch, errs []error) {
	fifo := strings.HasSuffix(b.url, ".fifo")
	in := &awssqs.SendMessageBatchInput{QueueUrl: aws.String(b.url), Entries: make([]types.SendMessageBatchRequestEntry, len(b.indexes))}
	for j, i := range b.indexes {
		in.Entries[j] = requestEntry(strconv.Itoa(j), entries[i], fifo)
	}
	out, err := s.client.SendMessageBatch(ctx, in)
	if err != nil {
		missing := isMissingQueue(err)
		err = sendError(b.url, err)
		if len(b.indexes) > 1 && errors.Is(err, outbox.ErrRefused) && !missing {
			// SQS refused the call as a whole for what one entry holds
			// (too long together, contents it does not take): each is
			// sent alone, so that only the entry at fault is refused.
			for _, i := range b.indexes {
				s.sendBatch(ctx, entries, sendBatch{url: b.url, indexes: []int{i}}, errs)
			}
			return
		}
		for _, i := range b.indexes {
			errs[i] = err
		}
		return
	}
	for _, f := range out.Failed {
		j, convErr := strconv.Atoi(aws.ToString(f.Id))
		if convErr != nil || j < 0 || j >= len(b.indexes) {
			continue
		}
		e := entryError(f)
		if e.RetryClass() == retry.Permanent {
			errs[b.indexes[j]] = &outbox.RefusedError{Destination: b.url, Reason: e.code + ": " + e.message}
			continue
		}
		errs[b.indexes[j]] = e
	}
	// An entry neither reported sent nor failed is not known to be sent.
	sent := make(map[string]bool, len(out.Successful))
	for _, ok := range out.Successful {
		sent[aws.ToString(ok.Id)] = true
	}
	for j, i := range b.indexes {
		if errs[i] == nil && !sent[strconv.Itoa(j)] {
			errs[i] = fmt.Errorf("sqssource: SendMessageBatch to %s reported entry %d neither sent nor failed", b.url, j)
		}
	}
}

// requestEntry is e as a SendMessageBatch entry with batch id id.
func requestEntry(id string, e outbox.Entry, fifo bool) types.SendMessageBatchRequestEntry {
	attrs := make(map[string]types.MessageAttributeValue, len(e.Headers)+1)
	for k, v := range e.Headers {
		attrs[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	attrs[broker.IdempotencyKeyAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(e.ID)}
	r := types.SendMessageBatchRequestEntry{Id: aws.String(id), MessageBody: aws.String(string(e.Body)), MessageAttributes: attrs}
	if fifo {
		dedupID := sha256Hex(e.ID)
		group := e.OrderingKey
		switch {
		case group == "":
			group = dedupID
		case !validGroup(group):
			// The same key, the same group: its order is kept.
			group = sha256Hex(group)
		}
		r.MessageGroupId, r.MessageDeduplicationId = aws.String(group), aws.String(dedupID)
	}
	return r
}

// sendError is a failed SendMessageBatch call as the relay takes it: the
// queue's absence, a message too large or contents SQS refuses are
// refusals for good; the rest are of the moment.
func sendError(url string, err error) error {
	if isMissingQueue(err) {
		return &outbox.RefusedError{Destination: url, Reason: "no such queue"}
	}
	if isCode(err, "BatchRequestTooLong") {
		return &outbox.RefusedError{Destination: url, Reason: "message too large"}
	}
	if isCode(err, "InvalidMessageContents", "InvalidParameterValue", "InvalidAttributeName", "InvalidAttributeValue") {
		return &outbox.RefusedError{Destination: url, Reason: err.Error()}
	}
	return fmt.Errorf("sqssource: SendMessageBatch to %s: %w", url, err)
}

// isMissingQueue reports whether err says the queue does not exist.
func isMissingQueue(err error) bool {
	var missing *types.QueueDoesNotExist
	return errors.As(err, &missing) || isCode(err, "QueueDoesNotExist", "NonExistentQueue", "InvalidAddress")
}

// isCode reports whether err is an SQS API error with one of codes (its
// last dotted part: the JSON protocol may give the legacy query code).
func isCode(err error, codes ...string) bool {
	var api smithy.APIError
	if !errors.As(err, &api) {
		return false
	}
	code := api.ErrorCode()
	if i := strings.LastIndexByte(code, '.'); i >= 0 {
		code = code[i+1:]
	}
	for _, c := range codes {
		if code == c {
			return true
		}
	}
	return false
}
