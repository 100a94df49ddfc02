package sqssource

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/internal/sqsattr"
)

// Ack deletes m. It returns once the delete is queued; the delete itself
// goes out in a DeleteMessageBatch within DeleteFlushInterval, or sooner
// when ten are pending. A failed delete is logged and reported to each
// [HookSQSDeleteFailed]: the message comes back and dedup recognises it.
// After Close, Ack deletes at once.
func (s *Source) Ack(ctx context.Context, m *broker.Message) error {
	h, err := s.handleOf(m)
	if err != nil {
		return err
	}
	return s.deleter.enqueue(ctx, deleteEntry{id: m.ID, receipt: h.receipt})
}

// Nack makes m visible again after delay (rounded up to whole seconds; 0
// at once). The delay is cut to what SQS's 12-hour ceiling leaves of this
// delivery, so a long delay may end early.
func (s *Source) Nack(ctx context.Context, m *broker.Message, delay time.Duration) error {
	h, err := s.handleOf(m)
	if err != nil {
		return err
	}
	secs := min(ceilSeconds(max(delay, 0)), s.secondsLeft(h))
	if err := s.changeVisibility(ctx, "Nack", h, secs); err != nil {
		return fmt.Errorf("sqssource: nack %s: %w", m.ID, err)
	}
	return nil
}

// Extend keeps m hidden for d from now (rounded up to whole seconds, at
// least 1s). Past SQS's 12-hour ceiling it extends as far as allowed and
// returns ErrVisibilityLimit, or only ErrVisibilityLimit when nothing is
// left: the message will then be delivered again soon.
func (s *Source) Extend(ctx context.Context, m *broker.Message, d time.Duration) error {
	h, err := s.handleOf(m)
	if err != nil {
		return err
	}
	want := max(ceilSeconds(d), 1)
	left := s.secondsLeft(h)
	if left < 1 {
		return fmt.Errorf("sqssource: extend %s: %w", m.ID, ErrVisibilityLimit)
	}
	secs := min(want, left)
	if err := s.changeVisibility(ctx, "Extend", h, secs); err != nil {
		return fmt.Errorf("sqssource: extend %s: %w", m.ID, err)
	}
	for _, h := range s.hooks.extended {
		h.OnSQSVisibilityExtended(ctx, m.ID, time.Duration(secs)*time.Second)
	}
	if secs < want {
		return fmt.Errorf("sqssource: extend %s by %ds, not %ds: %w", m.ID, secs, want, ErrVisibilityLimit)
	}
	return nil
}

// secondsLeft is how far this delivery's visibility may still reach, with
// a second of margin for the clock difference to SQS.
func (s *Source) secondsLeft(h *handle) int32 {
	left := maxVisibility - time.Since(h.receivedAt) - time.Second
	if left <= 0 {
		return 0
	}
	return int32(left / time.Second)
}

func ceilSeconds(d time.Duration) int32 {
	secs := (d + time.Second - 1) / time.Second
	return int32(min(secs, maxVisibility/time.Second))
}

func (s *Source) changeVisibility(ctx context.Context, op string, h *handle, secs int32) error {
	err := s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		_, err := s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl:          aws.String(s.queueURL),
			ReceiptHandle:     aws.String(h.receipt),
			VisibilityTimeout: secs,
		}, callOptions)
		if err != nil && isLostHandle(err) {
			return deliveryLost("ChangeMessageVisibility", err)
		}
		return err
	}, s.onRetry(ctx, op))
	s.tel.visibilityChanged(ctx, op, err)
	return err
}

// DeadLetter sends a copy of m to the dead-letter queue (body, attributes,
// plus ReasonAttribute and OriginalIDAttribute; on a FIFO queue the same
// MessageGroupId and the original MessageId as MessageDeduplicationId, so a
// repeated call within SQS's 5-minute window adds no second copy), then
// deletes m. Without a dead-letter queue it returns ErrNoDeadLetterQueue
// and leaves m alone.
func (s *Source) DeadLetter(ctx context.Context, m *broker.Message, reason string) error {
	h, err := s.handleOf(m)
	if err != nil {
		return err
	}
	if s.dlq == nil {
		return fmt.Errorf("sqssource: dead-letter %s: %w", m.ID, ErrNoDeadLetterQueue)
	}
	in := &awssqs.SendMessageInput{
		QueueUrl:          aws.String(s.dlq.url),
		MessageBody:       aws.String(string(m.Body)),
		MessageAttributes: s.deadLetterAttributes(m, h, reason),
	}
	if s.dlq.fifo {
		group := h.groupID
		if group == "" {
			group = m.ID
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	err = s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		_, err := s.client.SendMessage(ctx, in, callOptions)
		return err
	}, s.onRetry(ctx, "SendMessage"))
	s.tel.deadLettered(ctx, err)
	if err != nil {
		return fmt.Errorf("sqssource: dead-letter %s: send to %s: %w", m.ID, queueName(s.dlq.url), err)
	}
	for _, h := range s.hooks.deadLetter {
		h.OnSQSDeadLetter(ctx, m.ID, reason)
	}
	s.log.Info("sqssource: message dead-lettered", "message_id", m.ID, "reason", reason)
	// Deleted at once, not batched: the copy exists, and the caller should
	// learn now if the original could not be removed.
	if err := s.deleteOne(ctx, deleteEntry{id: m.ID, receipt: h.receipt}); err != nil {
		return fmt.Errorf("sqssource: dead-letter %s: sent, but deleting the original: %w", m.ID, err)
	}
	return nil
}

// maxAttributes is SQS's limit of message attributes per message.
const maxAttributes = 10

func (s *Source) deadLetterAttributes(m *broker.Message, h *handle, reason string) map[string]types.MessageAttributeValue {
	out := make(map[string]types.MessageAttributeValue, len(h.attrs)+2)
	for k, v := range h.attrs {
		// The SDK rejects a value carrying both, and a received value
		// carries list fields SendMessage does not take.
		out[k] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	delete(out, ReasonAttribute)
	delete(out, OriginalIDAttribute)
	// Our two must fit in SQS's ten: drop originals beyond that, last names
	// first, but never the idempotency key.
	if extra := len(out) + 2 - maxAttributes; extra > 0 {
		names := make([]string, 0, len(out))
		for k := range out {
			if k != broker.IdempotencyKeyAttribute {
				names = append(names, k)
			}
		}
		slices.Sort(names)
		dropped := names[len(names)-extra:]
		for _, k := range dropped {
			delete(out, k)
		}
		s.log.Warn("sqssource: too many attributes for a dead-letter copy; dropped some", "message_id", m.ID, "dropped", dropped)
	}
	// SQS counts the body and each attribute's name, type and value
	// against the dead-letter queue's limit. The original fit its queue,
	// which Check keeps no larger than this one: ours get what is left,
	// the original ID first, the reason cut to the rest (its whole text
	// is in the log and the store).
	room := int(s.dlq.maxSize.Load()) - len(m.Body)
	for k, v := range out {
		room -= attributeSize(k, v)
	}
	id := types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(m.ID)}
	if n := attributeSize(OriginalIDAttribute, id); n <= room {
		out[OriginalIDAttribute], room = id, room-n
	}
	if room -= len(ReasonAttribute) + len("String"); room > 0 {
		r := sqsattr.Reason(reason, min(room, sqsattr.MaxReasonBytes))
		if len(r) <= room {
			out[ReasonAttribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(r)}
		}
	}
	return out
}

// attributeSize is what an attribute counts against a message's size.
func attributeSize(name string, v types.MessageAttributeValue) int {
	return len(name) + len(aws.ToString(v.DataType)) + len(aws.ToString(v.StringValue)) + len(v.BinaryValue)
}

// deleteEntry is one pending ack.
type deleteEntry struct{ id, receipt string }

// deleter batches acks into DeleteMessageBatch calls. Its goroutines (one
// batcher, DeleteConcurrency workers) are owned by the Source and stopped
// by Close.
type deleter struct {
	s       *Source
	in      chan deleteEntry
	batches chan []deleteEntry
	wg      sync.WaitGroup

	mu     sync.RWMutex // held for reading while sending on in, so close cannot race a send
	closed bool

	// ctx is the flush context: not cancelled by Close, only when Close's
	// own ctx ends before the flush does.
	ctx    context.Context
	cancel context.CancelFunc
}

func newDeleter(base context.Context, s *Source) *deleter {
	ctx, cancel := context.WithCancel(base)
	d := &deleter{
		s:       s,
		in:      make(chan deleteEntry, 4*maxBatch*s.cfg.deleteWorkers),
		batches: make(chan []deleteEntry),
		ctx:     ctx,
		cancel:  cancel,
	}
	d.wg.Add(1 + s.cfg.deleteWorkers)
	go d.batch()
	for range s.cfg.deleteWorkers {
		go d.work()
	}
	return d
}

func (d *deleter) enqueue(ctx context.Context, e deleteEntry) error {
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return d.s.deleteOne(ctx, e)
	}
	defer d.mu.RUnlock()
	select {
	case d.in <- e:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *deleter) batch() {
	defer d.wg.Done()
	defer close(d.batches)
	var pending []deleteEntry
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	flush := func() {
		timer.Stop()
		if len(pending) > 0 {
			d.batches <- pending
			pending = nil
		}
	}
	for {
		select {
		case e, ok := <-d.in:
			if !ok {
				flush()
				return
			}
			pending = append(pending, e)
			if len(pending) == 1 {
				timer.Reset(d.s.cfg.flushInterval)
			}
			if len(pending) == maxBatch {
				flush()
			}
		case <-timer.C:
			flush()
		}
	}
}

func (d *deleter) work() {
	defer d.wg.Done()
	for b := range d.batches {
		d.s.deleteBatch(d.ctx, b)
	}
}

// close stops taking acks, flushes what is pending and waits for the
// workers, cancelling their calls if ctx ends first.
func (d *deleter) close(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	close(d.in)
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(done)
	}()
	defer d.cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		d.cancel()
		<-done
		return fmt.Errorf("sqssource: close: flushing deletes: %w", ctx.Err())
	}
}

// deleteBatch deletes up to ten messages, retrying the entries that failed
// for a reason worth retrying.
func (s *Source) deleteBatch(ctx context.Context, entries []deleteEntry) {
	remaining := entries
	err := s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		in := &awssqs.DeleteMessageBatchInput{
			QueueUrl: aws.String(s.queueURL),
			Entries:  make([]types.DeleteMessageBatchRequestEntry, len(remaining)),
		}
		for i, e := range remaining {
			in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(e.receipt)}
		}
		out, err := s.client.DeleteMessageBatch(ctx, in, callOptions)
		s.tel.deleteBatch(ctx, err)
		if err != nil {
			return err
		}
		var again []deleteEntry
		var againErr error
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(remaining) {
				continue
			}
			e, ee := remaining[i], entryError(f)
			switch {
			case lostHandleCode(ee.code):
				s.deleteFailed(ctx, e, deliveryLost("DeleteMessageBatch", ee))
			case !ee.RetryClass().Retryable():
				s.deleteFailed(ctx, e, ee)
			default:
				again, againErr = append(again, e), ee
			}
		}
		remaining = again
		return againErr
	}, s.onRetry(ctx, "DeleteMessageBatch"))
	if err == nil {
		return
	}
	if isLostHandle(err) && len(remaining) > 1 {
		// The whole call was refused for a handle: find which, one by one.
		for _, e := range remaining {
			if err := s.deleteOne(ctx, e); err != nil {
				s.deleteFailed(ctx, e, err)
			}
		}
		return
	}
	for _, e := range remaining {
		s.deleteFailed(ctx, e, err)
	}
}

// deleteOne deletes one message now. A lost handle is reported to the hook
// and is not an error: the message comes back, and dedup recognises it.
func (s *Source) deleteOne(ctx context.Context, e deleteEntry) error {
	err := s.cfg.policy.Do(ctx, func(ctx context.Context) error {
		_, err := s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{
			QueueUrl:      aws.String(s.queueURL),
			ReceiptHandle: aws.String(e.receipt),
		}, callOptions)
		return err
	}, s.onRetry(ctx, "DeleteMessage"))
	if err != nil && isLostHandle(err) {
		s.deleteFailed(ctx, e, deliveryLost("DeleteMessage", err))
		return nil
	}
	return err
}

func (s *Source) deleteFailed(ctx context.Context, e deleteEntry, err error) {
	s.tel.deleteFailed(ctx, err)
	if errors.Is(err, ErrDeliveryLost) {
		s.log.Info("sqssource: delete of a message whose visibility ran out; it will be delivered again", "message_id", e.id, "err", err)
	} else {
		s.log.Warn("sqssource: delete failed; the message will be delivered again", "message_id", e.id, "err", err)
	}
	for _, h := range s.hooks.deleteFailed {
		h.OnSQSDeleteFailed(ctx, e.id, err)
	}
}
