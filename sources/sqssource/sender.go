package sqssource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

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
	// sendBatchBytes bounds the bodies and attributes of one call. SQS
	// takes up to 1 MiB in a call today; 256 KiB, its bound until 2025,
	// is what every region and emulator takes.
	sendBatchBytes = 256 << 10
	// sendCalls bounds the SendMessageBatch calls of one Send in flight:
	// ten, so that a relay's default batch (outbox.DefaultBatchSize, 100
	// entries) goes out in one wave of calls rather than in two.
	sendCalls = 10
)

// Sender is an outbox.Sender to SQS: each entry's Destination is a queue
// URL. It sends with SendMessageBatch, ten entries (at most 256 KiB) a
// call, several calls at once.
//
// Each message carries the entry's ID as its idempotency-key message
// attribute, which an onceq consumer of the queue takes as the message's
// key, so that a re-dispatched copy is a duplicate there; the entry's
// Headers are String attributes beside it. On a FIFO queue (a URL ending
// in .fifo) the MessageGroupId is the entry's OrderingKey (its ID's hash
// when it has none) and the MessageDeduplicationId the SHA-256 of its ID,
// so that SQS itself drops a copy sent within its five-minute window.
//
// A missing queue, a message too large or contents SQS refuses are
// refused for good (outbox.RefusedError); so is, alone and before the
// call, an entry whose body, ID or headers are not text SQS carries (a
// binary body: encode it first). Anything else is a failure of the
// moment, sent again by the relay.
type Sender struct {
	client *awssqs.Client
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
	for i, e := range entries {
		errs[i] = uncarriable(e)
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, sendCalls)
	for _, batch := range sendBatches(entries, errs) {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			s.sendBatch(ctx, entries, batch, errs)
		})
	}
	wg.Wait()
	return errs
}

// sendBatch is one entry batch: the indexes into entries of one queue.
type sendBatch struct {
	url     string
	indexes []int
}

// sendBatches groups entries by queue, in their order, into batches SQS
// takes in one call, leaving out those refused already (errs).
func sendBatches(entries []outbox.Entry, errs []error) []sendBatch {
	var out []sendBatch
	open := map[string]int{} // queue URL → its batch being filled
	size := map[string]int{}
	for i, e := range entries {
		if errs[i] != nil {
			continue
		}
		n := entrySize(e)
		b, ok := open[e.Destination]
		if !ok || len(out[b].indexes) == sendBatchMax || size[e.Destination]+n > sendBatchBytes {
			b = len(out)
			open[e.Destination] = b
			size[e.Destination] = 0
			out = append(out, sendBatch{url: e.Destination})
		}
		out[b].indexes = append(out[b].indexes, i)
		size[e.Destination] += n
	}
	return out
}

// uncarriable refuses for good an entry SQS cannot carry as it is: its
// body, ID and headers travel as text, and SQS takes only some Unicode
// characters. Bytes that are not UTF-8 would be replaced on the way (the
// message stored altered, and its checksum failing the whole call), so
// such an entry is refused alone, before the call.
func uncarriable(e outbox.Entry) error {
	refuse := func(what string) error {
		return &outbox.RefusedError{Destination: e.Destination,
			Reason: what + " is not text SQS carries (it takes UTF-8 of #x9, #xA, #xD, #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 up; a binary body needs encoding, base64 say)"}
	}
	if !sqsText(string(e.Body)) {
		return refuse("the body")
	}
	if !sqsText(e.ID) {
		return refuse("the entry's ID (its idempotency key)")
	}
	for k, v := range e.Headers {
		if !sqsText(k) || !sqsText(v) {
			return refuse("a header")
		}
	}
	return nil
}

// sqsText reports whether SQS takes s as it is.
func sqsText(s string) bool {
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			// Invalid UTF-8 decodes as RuneError; a genuine U+FFFD is taken.
			if !utf8.ValidString(s) {
				return false
			}
		case r == 0x9 || r == 0xA || r == 0xD:
		case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF:
			return false
		}
	}
	return true
}

// entrySize is what SQS counts of a message against its size limits.
func entrySize(e outbox.Entry) int {
	n := len(e.Body) + len(broker.IdempotencyKeyAttribute) + len(e.ID) + len("String")
	for k, v := range e.Headers {
		n += len(k) + len(v) + len("String")
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
		if len(b.indexes) > 1 && isCode(err, "BatchRequestTooLong") {
			// Split: only an entry too large alone is refused.
			for _, i := range b.indexes {
				s.sendBatch(ctx, entries, sendBatch{url: b.url, indexes: []int{i}}, errs)
			}
			return
		}
		err = sendError(b.url, err)
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
		sum := sha256.Sum256([]byte(e.ID))
		dedupID := hex.EncodeToString(sum[:])
		group := e.OrderingKey
		if group == "" {
			group = dedupID
		}
		r.MessageGroupId, r.MessageDeduplicationId = aws.String(group), aws.String(dedupID)
	}
	return r
}

// sendError is a failed SendMessageBatch call as the relay takes it: the
// queue's absence, a message too large or contents SQS refuses are
// refusals for good; the rest are of the moment.
func sendError(url string, err error) error {
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) || isCode(err, "QueueDoesNotExist", "NonExistentQueue") {
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
