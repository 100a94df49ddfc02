package redrive

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/sources/kafkagroup"
)

// KafkaConfig says which dead-letter topic a Kafka Lot redrives.
type KafkaConfig struct {
	// Brokers are the bootstrap brokers.
	Brokers []string
	// DeadLetterTopic is the topic redriven.
	DeadLetterTopic string
	// Group is the redrive's consumer group: its committed offsets are
	// where the next run in the group starts, so a letter looked at is
	// not looked at again by the group (default
	// "onceq-redrive-"+DeadLetterTopic).
	Group string
	// Topic, when set, is where every letter goes back to; by default
	// each goes to the topic its kafkagroup.OriginalTopicHeader names.
	Topic string
	// Key is the stored key of a letter's message (default
	// RecordKeys("onceq"), the consumer's default namespace).
	Key KeyFunc
	// Idle ends the Lot after a poll this long found nothing (default 2s).
	Idle time.Duration
	// Options are more franz-go options (TLS, SASL).
	Options []kgo.Opt
	// NoGroup reads every partition from its start with no consumer
	// group, and commits nothing: a run for one message (the console's)
	// that leaves the group's offsets to the runs over the whole topic.
	// Two such runs at once may both move a letter; the record's reset is
	// still conditional, and the consumer absorbs the second copy as the
	// same key.
	NoGroup bool
}

// Kafka is the Lot of a Kafka dead-letter topic, read by a consumer
// group with offsets committed by hand: a letter is produced back to its
// original topic (its key, value and headers, less the ones its
// dead-lettering added), and its offset is committed once it is moved or
// passed, short of the first letter of its partition left on the Lot (a
// worker holds its key, or it is newer than the run): the group's next
// run starts there. A group's partitions are read by one run at a time,
// and no rebalance happens while a poll's letters are being decided.
type Kafka struct {
	cl   *kgo.Client
	cfg  KafkaConfig
	from string
	done []*kgo.Record // moved, settled or passed, to commit
	poll []*kgo.Record // the last poll's letters
	// left is, by partition, the lowest offset of a letter polled and
	// neither settled nor passed (held by a worker, newer than the run,
	// not reached): no offset from it on is committed, so that the
	// group's next run reads it again.
	left    map[partition]int64
	holding bool // a poll's letters are being decided (rebalances blocked)
	polled  bool // a poll found letters: the group was joined
	// joinBy is when a run that has not joined its group yet gives up.
	joinBy time.Time
	// ends is each partition's end offset as the run began, and read how
	// far the run has read each (from its start offset): it has looked at
	// every letter of its partitions once it has read up to their ends,
	// however slow the first fetch (an idle poll alone can come before
	// it). With a group, its partitions are those assigned, and a
	// partition's committed offset counts as read.
	ends, read map[int32]int64
	endsBy     time.Time
	amu        sync.Mutex
	assigned   map[int32]bool // with a group: this run's partitions, under amu
}

// joinWait bounds the wait for the group's join, however slow the broker:
// a run that ended at its first idle poll before it had its partitions
// would report no letter looked at while the topic holds some.
const joinWait = 30 * time.Second

// joined reports whether the run may call itself caught up: it reads
// with no group, or its group has a generation (this member was given
// its partitions, none if other runs hold them all).
func (k *Kafka) joined() bool {
	if k.cfg.NoGroup || k.polled {
		return true
	}
	_, gen := k.cl.GroupMetadata()
	return gen >= 0
}

// caughtUp reports whether the run has read each of its partitions (with
// no group, every one) up to its end offset as the run began.
func (k *Kafka) caughtUp() bool {
	if k.cfg.NoGroup {
		for p, end := range k.ends {
			if k.read[p] < end {
				return false
			}
		}
		return true
	}
	committed := k.cl.CommittedOffsets()[k.cfg.DeadLetterTopic]
	k.amu.Lock()
	defer k.amu.Unlock()
	for p := range k.assigned {
		if end, ok := k.ends[p]; ok && max(k.read[p], committed[p].Offset) < end {
			return false
		}
	}
	return true
}

// assign notes the partitions the group gave this run (add) or took back.
func (k *Kafka) assign(m map[string][]int32, add bool) {
	k.amu.Lock()
	defer k.amu.Unlock()
	for _, p := range m[k.cfg.DeadLetterTopic] {
		if add {
			k.assigned[p] = true
		} else {
			delete(k.assigned, p)
		}
	}
}

// letters notes how far the run has read each partition and keeps the
// letters among recs: no transaction marker, and with no group only those
// below the partition's end offset as the run began (a letter written
// since is the next look's; a group's run sets it aside by its time).
func (k *Kafka) letters(recs []*kgo.Record) []*kgo.Record {
	kept := recs[:0]
	for _, r := range recs {
		if r.Offset+1 > k.read[r.Partition] {
			k.read[r.Partition] = r.Offset + 1
		}
		if r.Attrs.IsControl() {
			continue
		}
		if end, ok := k.ends[r.Partition]; !k.cfg.NoGroup || ok && r.Offset < end {
			kept = append(kept, r)
		}
	}
	return kept
}

// endOffsets returns the start and the end offset of each partition of
// topic: a partition whose letters all expired (or were deleted) starts at
// its end, and is read to it with nothing fetched.
func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (starts, ends map[int32]int64, err error) {
	meta := kmsg.NewPtrMetadataRequest()
	mt := kmsg.NewMetadataRequestTopic()
	mt.Topic = kmsg.StringPtr(topic)
	meta.Topics = append(meta.Topics, mt)
	mresp, err := meta.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, err
	}
	if len(mresp.Topics) != 1 {
		return nil, nil, fmt.Errorf("no metadata for topic %s", topic)
	}
	if err := kerr.ErrorForCode(mresp.Topics[0].ErrorCode); err != nil {
		return nil, nil, fmt.Errorf("topic %s: %w", topic, err)
	}
	list := func(timestamp int64) (map[int32]int64, error) {
		lo := kmsg.NewPtrListOffsetsRequest()
		lo.ReplicaID = -1
		lo.IsolationLevel = 1 // read_committed: the last stable offset, as the run reads
		lt := kmsg.NewListOffsetsRequestTopic()
		lt.Topic = topic
		for _, p := range mresp.Topics[0].Partitions {
			lp := kmsg.NewListOffsetsRequestTopicPartition()
			lp.Partition, lp.Timestamp = p.Partition, timestamp
			lt.Partitions = append(lt.Partitions, lp)
		}
		lo.Topics = append(lo.Topics, lt)
		lresp, err := lo.RequestWith(ctx, cl)
		if err != nil {
			return nil, err
		}
		out := map[int32]int64{}
		for _, t := range lresp.Topics {
			for _, p := range t.Partitions {
				if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
					return nil, fmt.Errorf("topic %s partition %d: %w", topic, p.Partition, err)
				}
				out[p.Partition] = p.Offset
			}
		}
		return out, nil
	}
	if starts, err = list(-2); err != nil { // -2: the start
		return nil, nil, err
	}
	if ends, err = list(-1); err != nil { // -1: the end
		return nil, nil, err
	}
	return starts, ends, nil
}

// NewKafka returns the Lot of cfg's dead-letter topic.
func NewKafka(cfg KafkaConfig) (*Kafka, error) {
	if cfg.DeadLetterTopic == "" || len(cfg.Brokers) == 0 {
		return nil, errors.New("redrive: a Kafka dead-letter topic and brokers are needed")
	}
	if cfg.Group == "" && !cfg.NoGroup {
		cfg.Group = "onceq-redrive-" + cfg.DeadLetterTopic
	}
	if cfg.Key == nil {
		cfg.Key = RecordKeys("onceq")
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 2 * time.Second
	}
	// Read committed: a letter of an aborted transaction was never dead-
	// lettered, and is not listed or moved.
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ConsumeTopics(cfg.DeadLetterTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted())}
	// Transaction markers are read too, so that a partition whose last
	// offset is a marker is seen read up to its end.
	opts = append(opts, kgo.KeepControlRecords())
	k := &Kafka{cfg: cfg, from: "Kafka topic " + cfg.DeadLetterTopic, left: map[partition]int64{}, assigned: map[int32]bool{}}
	if cfg.NoGroup {
		k.cfg.Group = ""
	} else {
		opts = append(opts, kgo.ConsumerGroup(cfg.Group), kgo.DisableAutoCommit(), kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { k.assign(m, true) }),
			kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { k.assign(m, false) }),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { k.assign(m, false) }))
	}
	opts = append(opts, cfg.Options...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("redrive: Kafka client: %w", err)
	}
	k.cl = cl
	return k, nil
}

type partition struct {
	topic string
	p     int32
}

// commit commits the offsets of the letters done with, short of the first
// letter left in each partition, and lets the group rebalance again.
func (k *Kafka) commit(ctx context.Context) error {
	done := make(map[*kgo.Record]bool, len(k.done))
	for _, r := range k.done {
		done[r] = true
	}
	for _, r := range k.poll {
		at := partition{r.Topic, r.Partition}
		if o, ok := k.left[at]; !done[r] && (!ok || r.Offset < o) {
			k.left[at] = r.Offset
		}
	}
	k.poll = k.poll[:0]
	k.done = slices.DeleteFunc(k.done, func(r *kgo.Record) bool {
		o, ok := k.left[partition{r.Topic, r.Partition}]
		return ok && r.Offset >= o
	})
	var err error
	if k.cfg.NoGroup {
		k.done = k.done[:0]
		return nil
	}
	if len(k.done) > 0 {
		if err = k.cl.CommitRecords(ctx, k.done...); err != nil {
			err = fmt.Errorf("redrive: committing the offsets of group %s on %s: %w", k.cfg.Group, k.from, err)
		}
		k.done = k.done[:0]
	}
	if k.holding {
		k.cl.AllowRebalance()
		k.holding = false
	}
	return err
}

// Next implements Lot.
func (k *Kafka) Next(ctx context.Context) ([]*Letter, error) {
	if err := k.commit(ctx); err != nil {
		return nil, err
	}
	if k.ends == nil {
		starts, ends, err := endOffsets(ctx, k.cl, k.cfg.DeadLetterTopic)
		if err != nil {
			return nil, fmt.Errorf("redrive: the end offsets of %s: %w", k.from, err)
		}
		// Read from each partition's start: none of it is fetched where it
		// has nothing left.
		k.ends, k.read, k.endsBy = ends, starts, time.Now().Add(joinWait)
	}
	for {
		idle := k.cfg.Idle
		if !k.polled {
			idle *= 2 // the first also joins the group
		}
		// A poll begun before the group had a generation does not show the
		// run caught up: the assignment and the first fetch come after.
		wasJoined := k.joined()
		pctx, cancel := context.WithTimeout(ctx, idle)
		fs := k.cl.PollFetches(pctx)
		cancel()
		k.holding = true
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var errs []error
		fs.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				errs = append(errs, fmt.Errorf("redrive: reading %s partition %d: %w", topic, p, err))
			}
		})
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		recs := fs.Records()
		if len(recs) == 0 && !wasJoined {
			// Not caught up: the group has not given this run its
			// partitions yet (a join slowed by a loaded broker).
			if k.joinBy.IsZero() {
				k.joinBy = time.Now().Add(joinWait)
			}
			if time.Now().Before(k.joinBy) {
				k.cl.AllowRebalance() // the join goes on between polls
				k.holding = false
				continue
			}
			return nil, fmt.Errorf("redrive: consumer group %s was given no partitions of %s in %v", k.cfg.Group, k.cfg.DeadLetterTopic, joinWait)
		}
		recs = k.letters(recs)
		if len(recs) == 0 && !k.caughtUp() && time.Now().Before(k.endsBy) {
			// A slow first fetch (or offset fetch), or markers only.
			k.cl.AllowRebalance()
			k.holding = false
			continue
		}
		if len(recs) == 0 {
			return nil, nil // idle: caught up
		}
		k.polled = true
		k.poll = append(k.poll, recs...)
		out := make([]*Letter, 0, len(recs))
		for _, r := range recs {
			out = append(out, k.letter(r))
		}
		return out, nil
	}
}

func (k *Kafka) letter(r *kgo.Record) *Letter {
	attrs := make(map[string]string, len(r.Headers))
	for _, h := range r.Headers {
		attrs[h.Key] = string(h.Value)
	}
	orig := attrs[kafkagroup.OriginalTopicHeader]
	to := k.cfg.Topic
	if to == "" {
		to = orig
	}
	l := &Letter{ID: r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "@" + strconv.FormatInt(r.Offset, 10),
		Reason: attrs[kafkagroup.ReasonHeader], At: r.Timestamp, From: k.from, To: "Kafka topic " + to, handle: r}
	for _, h := range []string{kafkagroup.ReasonHeader, kafkagroup.OriginalTopicHeader, kafkagroup.OriginalPartitionHeader, kafkagroup.OriginalOffsetHeader} {
		delete(attrs, h)
	}
	l.KeyHash = "none"
	if orig == "" && k.cfg.Topic == "" {
		l.To = ""
		return l
	}
	// Its record is the one of the topic it was read from, where its
	// effect ran or not, wherever it goes back to.
	read := orig
	if read == "" {
		read = to
	}
	key, err := k.cfg.Key(&broker.Message{ID: l.ID, OrderingKey: string(r.Key), Body: r.Value, Attributes: attrs,
		Origin: broker.Origin{System: "kafka", Destination: read}})
	if err == nil {
		l.Key, l.KeyHash = key, dedup.KeyHash(key)
	} else {
		l.keyErr = err
	}
	return l
}

// Move implements Lot.
func (k *Kafka) Move(ctx context.Context, l *Letter) error {
	r := l.handle.(*kgo.Record)
	if l.To == "" {
		return fmt.Errorf("redrive: %s carries no %s header: give the topic it goes back to", l.ID, kafkagroup.OriginalTopicHeader)
	}
	out := &kgo.Record{Topic: l.To[len("Kafka topic "):], Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		switch h.Key {
		case kafkagroup.ReasonHeader, kafkagroup.OriginalTopicHeader, kafkagroup.OriginalPartitionHeader, kafkagroup.OriginalOffsetHeader:
		default:
			out.Headers = append(out.Headers, h)
		}
	}
	if err := k.cl.ProduceSync(ctx, out).FirstErr(); err != nil {
		return fmt.Errorf("redrive: producing %s to %s: %w", l.ID, l.To, err)
	}
	return nil
}

// Settle implements Lot: its offset is committed with the poll's.
func (k *Kafka) Settle(_ context.Context, l *Letter) error {
	k.done = append(k.done, l.handle.(*kgo.Record))
	return nil
}

// Pass implements Lot as Settle does: the group moves past it.
func (k *Kafka) Pass(ctx context.Context, l *Letter) error { return k.Settle(ctx, l) }

// Close implements Lot: the offsets of the letters done with are
// committed, and the client leaves the group.
func (k *Kafka) Close(ctx context.Context) error {
	err := k.commit(ctx)
	k.cl.Close()
	return err
}
