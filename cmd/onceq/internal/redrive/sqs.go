package redrive

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/sources/sqssource"
)

// SQSConfig says which dead-letter queue an SQS Lot redrives, and to where.
type SQSConfig struct {
	// DeadLetterQueue is the dead-letter queue's URL.
	DeadLetterQueue string
	// Source is the URL of the queue its letters go back to. Empty: the
	// one queue whose redrive policy names DeadLetterQueue (SQS's
	// ListDeadLetterSourceQueues), an error when there is not exactly one.
	Source string
	// Key is the stored key of a letter's message (default BodyKeys("onceq"), the consumer's default namespace).
	Key KeyFunc
	// Hold is how long a letter received stays out of other readers'
	// sight while the run decides (default 5m; 1s to 12h): a run that ends early
	// gives back what it did not move; one that dies leaves it unseen
	// until Hold ends.
	Hold time.Duration
	// EmptyReceives ends the Lot after this many receives in a row found
	// nothing (default 2).
	EmptyReceives int
}

// SQS is the Lot of an SQS dead-letter queue: a letter is received with a
// visibility of Hold (no other run sees it meanwhile), sent back to the
// source queue (a FIFO one with its group and its dead-letter copy's
// MessageId as deduplication ID, so a send repeated within SQS's window
// adds no copy), then deleted by its receipt. The ones left are made
// visible again by Close.
//
// A FIFO dead-letter queue returns none of a group's letters while one of
// them is out of sight, and always its oldest first: a letter left there
// would hide the letters behind it from every run. So a letter a run
// leaves on a FIFO queue goes to the back of its group (sent again, then
// deleted) before the next receive, and is not looked at again.
type SQS struct {
	client   *awssqs.Client
	cfg      SQSConfig
	from, to string
	fifo     bool
	left     map[string]string // message ID → receipt handle, neither moved nor settled
	// seen: the message IDs this run looked at, or sent to the back of
	// their group. A letter left comes back into sight once Hold ends, and
	// is not looked at again by this run.
	seen map[string]bool
	// fifoDLQ: the dead-letter queue is FIFO; batch is the last receive's
	// letters, the ones left of which go to the back of their group.
	fifoDLQ bool
	batch   []*Letter
	// start: a letter set aside since is left where it is (the run's
	// newer ones): sent to the back, it would come to another run at
	// once, which would send it back in turn.
	start   time.Time
	empties int
	// dry: Plan reads the Lot, which writes nothing (see plan); looked
	// holds the IDs of the last letters Next returned.
	dry    bool
	looked []string
}

// NewSQS returns the Lot of cfg's dead-letter queue.
func NewSQS(ctx context.Context, client *awssqs.Client, cfg SQSConfig) (*SQS, error) {
	if cfg.DeadLetterQueue == "" {
		return nil, errors.New("redrive: no dead-letter queue URL")
	}
	if cfg.Key == nil {
		cfg.Key = BodyKeys("onceq")
	}
	if cfg.Hold == 0 {
		cfg.Hold = 5 * time.Minute
	}
	if cfg.Hold < time.Second || cfg.Hold > 12*time.Hour {
		// SQS counts a visibility in whole seconds, up to 12 hours: a
		// shorter one hides nothing from another run.
		return nil, fmt.Errorf("redrive: hold %v: want 1s to 12h, SQS's bounds of a visibility", cfg.Hold)
	}
	if cfg.EmptyReceives <= 0 {
		cfg.EmptyReceives = 2
	}
	if cfg.Source == "" {
		out, err := client.ListDeadLetterSourceQueues(ctx, &awssqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(cfg.DeadLetterQueue)})
		if err != nil {
			return nil, fmt.Errorf("redrive: finding the source queue of %s (give it): %w", queueName(cfg.DeadLetterQueue), err)
		}
		if len(out.QueueUrls) != 1 {
			return nil, fmt.Errorf("redrive: %d queues name %s in their redrive policy, want exactly one: give the source queue", len(out.QueueUrls), queueName(cfg.DeadLetterQueue))
		}
		cfg.Source = out.QueueUrls[0]
	}
	return &SQS{client: client, cfg: cfg, from: "SQS queue " + queueName(cfg.DeadLetterQueue), to: "SQS queue " + queueName(cfg.Source),
		fifo: strings.HasSuffix(cfg.Source, ".fifo"), fifoDLQ: strings.HasSuffix(cfg.DeadLetterQueue, ".fifo"),
		left: map[string]string{}, seen: map[string]bool{}, start: time.Now()}, nil
}

// Source is the URL of the queue the letters go back to.
func (s *SQS) Source() string { return s.cfg.Source }

func queueName(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

type sqsLetter struct {
	receipt, group string
	body           string
	attrs          map[string]types.MessageAttributeValue
}

// plan makes the Lot Plan's: SQS reads a letter only by receiving it,
// which counts a receive and hides it, so a letter Plan has looked at
// goes back into sight at once, before the next receive, rather than at
// the end of the run; and no letter is sent to the back of its FIFO
// group, a write. A letter received again during the run stays out of
// sight until its end, so that the receives reach the letters not looked
// at yet; on a FIFO queue those are the ones at the front of their group
// (unseen counts the others).
func (s *SQS) plan() { s.dry = true }

// unseen is, after a dry run of a FIFO queue, about how many letters it
// did not look at: SQS hands out none behind a letter of its group that
// is out of sight, and a dry run sends none to the back. 0 for a
// standard queue, or when SQS does not say.
func (s *SQS) unseen(ctx context.Context) int {
	if !s.dry || !s.fifoDLQ {
		return 0
	}
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := s.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(s.cfg.DeadLetterQueue), AttributeNames: names})
	if err != nil {
		return 0
	}
	n := 0
	for _, a := range names {
		v, _ := strconv.Atoi(out.Attributes[string(a)])
		n += v
	}
	return max(n-len(s.seen), 0)
}

// Next implements Lot.
func (s *SQS) Next(ctx context.Context) ([]*Letter, error) {
	if s.dry {
		if err := s.giveBack(ctx, s.looked); err != nil {
			return nil, err
		}
		s.looked = s.looked[:0]
	} else if err := s.toBack(ctx); err != nil {
		return nil, err
	}
	for s.empties < s.cfg.EmptyReceives {
		out, err := s.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.cfg.DeadLetterQueue), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			VisibilityTimeout:           int32(s.cfg.Hold / time.Second),
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp, types.MessageSystemAttributeNameMessageGroupId},
		})
		if err != nil {
			return nil, fmt.Errorf("redrive: receiving from %s: %w", s.from, err)
		}
		letters := make([]*Letter, 0, len(out.Messages))
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			if s.seen[id] {
				// Back in sight: hidden again, given back by Close.
				s.left[id] = aws.ToString(m.ReceiptHandle)
				continue
			}
			s.seen[id] = true
			letters = append(letters, s.letter(m))
		}
		if len(letters) == 0 {
			s.empties++
			continue
		}
		s.empties = 0
		switch {
		case s.dry:
			for _, l := range letters {
				s.looked = append(s.looked, l.ID)
			}
		case s.fifoDLQ:
			s.batch = letters
		}
		return letters, nil
	}
	return nil, nil
}

// toBack sends the letters of the last receive that the run left on a
// FIFO dead-letter queue to the back of their group: a copy (body,
// attributes, group) is sent, then the letter deleted. A run that stops
// between the two leaves both, each decided alike by the next.
func (s *SQS) toBack(ctx context.Context) error {
	for len(s.batch) > 0 {
		l := s.batch[0]
		receipt, left := s.left[l.ID]
		if left && !l.At.After(s.start) {
			h := l.handle.(*sqsLetter)
			out, err := s.client.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(s.cfg.DeadLetterQueue),
				MessageBody: aws.String(h.body), MessageAttributes: h.attrs, MessageGroupId: aws.String(cmp.Or(h.group, l.ID)),
				MessageDeduplicationId: aws.String(l.ID)})
			if err != nil {
				return fmt.Errorf("redrive: sending %s, left, to the back of its group in %s: %w", l.ID, s.from, err)
			}
			s.seen[aws.ToString(out.MessageId)] = true
			if _, err := s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.cfg.DeadLetterQueue), ReceiptHandle: aws.String(receipt)}); err != nil {
				return fmt.Errorf("redrive: deleting %s, sent to the back of its group, from %s: %w", l.ID, s.from, err)
			}
			delete(s.left, l.ID)
		}
		s.batch = s.batch[1:]
	}
	return nil
}

func (s *SQS) letter(m types.Message) *Letter {
	id := aws.ToString(m.MessageId)
	s.left[id] = aws.ToString(m.ReceiptHandle)
	attrs := map[string]string{}
	for k, v := range m.MessageAttributes {
		if dt := aws.ToString(v.DataType); (strings.HasPrefix(dt, "String") || strings.HasPrefix(dt, "Number")) && v.StringValue != nil {
			attrs[k] = *v.StringValue
		}
	}
	l := &Letter{ID: id, Reason: attrs[sqssource.ReasonAttribute], From: s.from, To: s.to,
		handle: &sqsLetter{receipt: aws.ToString(m.ReceiptHandle), group: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)],
			body: aws.ToString(m.Body), attrs: m.MessageAttributes}}
	if ms, err := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		l.At = time.UnixMilli(ms)
	}
	delete(attrs, sqssource.ReasonAttribute)
	delete(attrs, sqssource.OriginalIDAttribute)
	key, err := s.cfg.Key(&broker.Message{ID: id, Body: []byte(aws.ToString(m.Body)), Attributes: attrs,
		OrderingKey: l.handle.(*sqsLetter).group, Origin: broker.Origin{System: sqssource.System, Destination: s.cfg.Source}})
	if err == nil {
		l.Key, l.KeyHash = key, dedup.KeyHash(key)
	} else {
		// No key, no record to read: the consumer could not key it either
		// (it dead-lettered it for that), and it goes back as it came;
		// but a letter naming no tenant (ErrNoTenant) is left.
		l.KeyHash, l.keyErr = "none", err
	}
	return l
}

// Move implements Lot: the letter's body and attributes, less the two
// its dead-lettering added, sent to the source queue.
func (s *SQS) Move(ctx context.Context, l *Letter) error {
	h := l.handle.(*sqsLetter)
	attrs := make(map[string]types.MessageAttributeValue, len(h.attrs))
	for k, v := range h.attrs {
		if k == sqssource.ReasonAttribute || k == sqssource.OriginalIDAttribute {
			continue
		}
		attrs[k] = types.MessageAttributeValue{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	in := &awssqs.SendMessageInput{QueueUrl: aws.String(s.cfg.Source), MessageBody: aws.String(h.body), MessageAttributes: attrs}
	if s.fifo {
		group := h.group
		if group == "" {
			group = l.ID
		}
		in.MessageGroupId, in.MessageDeduplicationId = aws.String(group), aws.String(l.ID)
	}
	if _, err := s.client.SendMessage(ctx, in); err != nil {
		return fmt.Errorf("redrive: sending %s to %s: %w", l.ID, s.to, err)
	}
	return nil
}

// Settle implements Lot: the letter is deleted from the dead-letter
// queue by its receipt.
func (s *SQS) Settle(ctx context.Context, l *Letter) error {
	h := l.handle.(*sqsLetter)
	if _, err := s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.cfg.DeadLetterQueue), ReceiptHandle: aws.String(h.receipt)}); err != nil {
		return fmt.Errorf("redrive: deleting %s from %s: %w", l.ID, s.from, err)
	}
	delete(s.left, l.ID)
	return nil
}

// Pass implements Lot: a letter left stays in the dead-letter queue,
// made visible again by Close.
func (s *SQS) Pass(context.Context, *Letter) error { return nil }

// Close implements Lot: the letters left are made visible again.
func (s *SQS) Close(ctx context.Context) error {
	err := s.giveBack(ctx, slices.Collect(maps.Keys(s.left)))
	clear(s.left)
	return err
}

// giveBack makes the letters of ids that are out of sight (left)
// visible again, each tried.
func (s *SQS) giveBack(ctx context.Context, ids []string) error {
	var errs []error
	for _, id := range ids {
		receipt, ok := s.left[id]
		if !ok {
			continue
		}
		_, err := s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(s.cfg.DeadLetterQueue),
			ReceiptHandle: aws.String(receipt), VisibilityTimeout: 0})
		if err != nil {
			errs = append(errs, fmt.Errorf("redrive: giving %s back to %s: %w", id, s.from, err))
			continue
		}
		delete(s.left, id)
	}
	return errors.Join(errs...)
}
