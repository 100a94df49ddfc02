package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	kgo "github.com/segmentio/kafka-go"
)

// kafkaBroker is the loopback broker binary (examples/kafkadev broker) as a
// process of its own, with the orders topic, its dead-letter topic and the
// workers' group.
type kafkaBroker struct {
	cmd               *exec.Cmd
	done              chan struct{}
	addr              string
	topic, dlq, group string
	partitions        int
	source            string // the worker's -source: kafka or franz
	protocol          string // -source franz: the group protocol
	session           time.Duration
	rebalance         time.Duration
	client            *kgo.Client
	tr                *kgo.Transport
	// borrowed: the broker process belongs to another kafkaBroker
	// (-pipeline's shipping topic on the orders' broker); close leaves it.
	borrowed bool
}

func startKafka(ctx context.Context, cfg settings, tmp, suffix string, logw io.Writer) (*kafkaBroker, error) {
	bin := cfg.kafkadevBin
	if bin == "" {
		bin = filepath.Join(tmp, "kafkadev")
		if err := goBuild(ctx, bin, "github.com/onceq/onceq/examples/kafkadev"); err != nil {
			return nil, err
		}
	}
	b := &kafkaBroker{topic: "chaos-orders-" + suffix, dlq: "chaos-dlq-" + suffix, group: "chaos-" + suffix,
		partitions: cfg.partitions, source: cfg.source, protocol: cfg.groupProtocol, session: cfg.kafkaSession, rebalance: cfg.kafkaRebalance, done: make(chan struct{})}
	topics := b.topic + "," + b.dlq
	if cfg.txn {
		topics += "," + b.txnOut()
	}
	if cfg.pipeline {
		ship := b.shipping()
		topics += "," + ship.topic + "," + ship.dlq
	}
	args := []string{"broker", "-port", "0", "-partitions", fmt.Sprint(cfg.partitions), "-topics", topics}
	if cfg.source == "share" {
		args = append(args, shareBrokerArgs()...)
	}
	if cfg.groupProtocol == "consumer" {
		// KIP-848 moves the session timeout and the heartbeat interval to
		// the broker: the same short timings as the classic members ask for.
		args = append(args, "-config", fmt.Sprintf("group.consumer.session.timeout.ms=%d", cfg.kafkaSession.Milliseconds()),
			"-config", "group.consumer.heartbeat.interval.ms=500")
	}
	b.cmd = exec.Command(bin, args...)
	if cfg.verboseWorker {
		b.cmd.Stderr = logw
	}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the kafkadev broker: %w", err)
	}
	// The broker prints its address once it listens.
	line := make(chan string, 1)
	go func() {
		defer close(b.done)
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- strings.TrimSpace(sc.Text())
		}
		close(line)
		_, _ = io.Copy(io.Discard, out)
		_ = b.cmd.Wait()
	}()
	select {
	case b.addr = <-line:
	case <-time.After(30 * time.Second):
	}
	if b.addr == "" {
		b.close()
		return nil, errors.New("the kafkadev broker printed no address")
	}
	b.tr = &kgo.Transport{}
	b.client = &kgo.Client{Addr: kgo.TCP(b.addr), Transport: b.tr, Timeout: 10 * time.Second}
	return b, nil
}

// shareLock is the share group's record lock: short, so that a frozen
// member's records come back within a chaos run.
const shareLock = 3 * time.Second

// shareBrokerArgs are the broker settings of a share group's run: the lock,
// swept often, a delivery-count limit the workers' MaxAttempts and lease
// fit in (order-worker checks it at start), and quick heartbeats.
func shareBrokerArgs() []string {
	return []string{"-config", fmt.Sprintf("group.share.record.lock.duration.ms=%d", shareLock.Milliseconds()),
		"-config", "share.record.lock.sweep.interval.ms=200",
		"-config", "group.share.delivery.count.limit=10",
		"-config", "group.share.heartbeat.interval.ms=500"}
}

func (b *kafkaBroker) workerArgs() []string {
	return []string{"-source", b.source, "-kafka-brokers", b.addr, "-kafka-topic", b.topic, "-kafka-group", b.group,
		"-kafka-dlq-topic", b.dlq,
		// A killed member is noticed after the session timeout, and a
		// rebalance waits for absent members up to the rebalance timeout
		// (restarted whenever the membership changes): both short, or
		// with a member coming or going every few seconds the group never
		// settles.
		"-kafka-session-timeout", b.session.String(), "-kafka-rebalance-timeout", b.rebalance.String(),
		// Frequent heartbeats: each member notices a rebalance sooner.
		"-kafka-heartbeat", "500ms",
		"-kafka-group-protocol", b.protocol}
}

// shipping is -pipeline's second stage on the same broker process: the
// shipping topic, its dead-letter topic and the shipping workers' group.
func (b *kafkaBroker) shipping() *kafkaBroker {
	s := *b
	s.topic, s.dlq, s.group, s.borrowed = "ship-"+b.topic, "ship-"+b.dlq, "ship-"+b.group, true
	return &s
}

func (b *kafkaBroker) destination() string { return b.topic }

// senderArgs send with the source's own client library (kafka-go or franz-go).
func (b *kafkaBroker) senderArgs() []string {
	return []string{"-send", b.source, "-kafka-brokers", b.addr}
}

// close stops the broker with SIGTERM and waits for it.
func (b *kafkaBroker) close() {
	if b.borrowed {
		return
	}
	if b.tr != nil {
		b.tr.CloseIdleConnections()
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(10 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
}

// send produces every delivery as its own record, keyed by the order ID
// (so a duplicate lands on its original's partition, as a producer retry
// would), with the idempotency-key header when the delivery has one.
func (b *kafkaBroker) send(ctx context.Context, ds []delivery) error {
	w := &kgo.Writer{Addr: kgo.TCP(b.addr), Topic: b.topic, Transport: b.tr, Balancer: &kgo.Hash{},
		RequiredAcks: kgo.RequireAll, BatchTimeout: time.Millisecond, BatchSize: 500}
	msgs := make([]kgo.Message, 0, len(ds))
	for _, d := range ds {
		m := kgo.Message{Key: []byte(d.id), Value: []byte(d.body)}
		if d.key != "" {
			m.Headers = []kgo.Header{{Key: "idempotency-key", Value: []byte(d.key)}}
		}
		msgs = append(msgs, m)
	}
	for len(msgs) > 0 {
		n := min(len(msgs), 2000)
		if err := w.WriteMessages(ctx, msgs[:n]...); err != nil {
			_ = w.Close()
			return fmt.Errorf("produce: %w", err)
		}
		msgs = msgs[n:]
	}
	return w.Close()
}

// left is the group's lag: log end minus committed offset, summed over the
// partitions. The source commits only what was settled, and settles only
// after COMPLETED (or a dead letter), so zero lag means nothing in flight.
func (b *kafkaBroker) left(ctx context.Context) (int, string, error) {
	if b.source == "share" {
		return b.shareLeft(ctx)
	}
	ends, err := b.ends(ctx, b.topic)
	if err != nil {
		return 0, "", err
	}
	parts := make([]int, b.partitions)
	for i := range parts {
		parts[i] = i
	}
	got, err := b.client.OffsetFetch(ctx, &kgo.OffsetFetchRequest{GroupID: b.group, Topics: map[string][]int{b.topic: parts}})
	if err == nil {
		err = got.Error
	}
	committed := map[int]int64{}
	switch {
	case errors.Is(err, kgo.GroupIdNotFound):
		// No member has joined yet: nothing is committed.
		got = &kgo.OffsetFetchResponse{}
	case err != nil:
		return 0, "", fmt.Errorf("committed offsets: %w", err)
	}
	for _, p := range got.Topics[b.topic] {
		if p.Error != nil {
			return 0, "", fmt.Errorf("committed offset of partition %d: %w", p.Partition, p.Error)
		}
		committed[p.Partition] = max(0, p.CommittedOffset) // -1: nothing committed yet
	}
	lag, end := 0, int64(0)
	for p, e := range ends {
		lag += int(max(0, e-committed[p]))
		end += e
	}
	return lag, fmt.Sprintf("%d records, %d not committed", end, lag), nil
}

// ends returns each partition's log end offset.
func (b *kafkaBroker) ends(ctx context.Context, topic string) (map[int]int64, error) {
	req := &kgo.ListOffsetsRequest{Topics: map[string][]kgo.OffsetRequest{}}
	for p := range b.partitions {
		req.Topics[topic] = append(req.Topics[topic], kgo.LastOffsetOf(p))
	}
	out, err := b.client.ListOffsets(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", topic, err)
	}
	ends := map[int]int64{}
	for _, p := range out.Topics[topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("offsets of %s/%d: %w", topic, p.Partition, p.Error)
		}
		ends[p.Partition] = p.LastOffset
	}
	if len(ends) != b.partitions {
		return nil, fmt.Errorf("offsets of %s: %d partitions, want %d", topic, len(ends), b.partitions)
	}
	return ends, nil
}

// deadLetters reads every partition of the dead-letter topic up to its
// end: the workers' dead letters, which carry their original offset (the
// letters -redrive parked there carry none, and stay after a redrive).
func (b *kafkaBroker) deadLetters(ctx context.Context) ([]string, error) {
	ends, err := b.ends(ctx, b.dlq)
	if err != nil {
		return nil, err
	}
	var bodies []string
	for p, end := range ends {
		if end == 0 {
			continue
		}
		r := kgo.NewReader(kgo.ReaderConfig{Brokers: []string{b.addr}, Topic: b.dlq, Partition: p, MaxWait: 100 * time.Millisecond})
		for {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			m, err := r.ReadMessage(rctx)
			cancel()
			if err != nil {
				_ = r.Close()
				return nil, fmt.Errorf("read %s/%d: %w", b.dlq, p, err)
			}
			if slices.ContainsFunc(m.Headers, func(h kgo.Header) bool { return h.Key == "onceq-original-offset" }) {
				bodies = append(bodies, string(m.Value))
			}
			if m.Offset+1 >= end {
				break
			}
		}
		if err := r.Close(); err != nil {
			return nil, err
		}
	}
	return bodies, nil
}
