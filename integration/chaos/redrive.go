package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// parkedReason is the reason the driver's parked dead letters carry.
const parkedReason = "parked by the chaos driver: a fault of the handler since fixed"

// parkPlan takes every twentieth order delivered once (no duplicate of it
// in ds) out of ds: those go straight to the dead-letter queue, as if an
// earlier release had dead-lettered them, and only a redrive brings them
// to the workers.
func parkPlan(ds []delivery) (sent, parked []delivery) {
	count := map[string]int{}
	for _, d := range ds {
		count[d.id]++
	}
	n := 0
	for _, d := range ds {
		if count[d.id] == 1 && !strings.HasPrefix(d.id, "bad-") {
			if n++; n%20 == 0 {
				parked = append(parked, d)
				continue
			}
		}
		sent = append(sent, d)
	}
	return sent, parked
}

// park puts ds into the dead-letter queue, with their idempotency keys
// and a reason, as the SQS source dead-letters a message.
func (b *sqsBroker) park(ctx context.Context, ds []delivery) error {
	for i := 0; i < len(ds); i += 10 {
		var entries []sqstypes.SendMessageBatchRequestEntry
		for j := i; j < min(i+10, len(ds)); j++ {
			attrs := map[string]sqstypes.MessageAttributeValue{
				"onceq-dead-letter-reason": {DataType: aws.String("String"), StringValue: aws.String(parkedReason)}}
			if ds[j].key != "" {
				attrs["idempotency-key"] = sqstypes.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(ds[j].key)}
			}
			entries = append(entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(ds[j].body), MessageAttributes: attrs})
		}
		out, err := b.q.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: aws.String(b.dlqURL), Entries: entries})
		if err == nil && len(out.Failed) > 0 {
			err = fmt.Errorf("%d sends failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			return fmt.Errorf("park in the DLQ: %w", err)
		}
	}
	return nil
}

// redriveResult is what -redrive's onceq redrive runs did.
type redriveResult struct {
	parked                                             int
	runs, moved, completed, held, passed, taken, faild int
	newer                                              int
	// resets counts, by key_hash, the records the runs reset.
	resets map[string]int
	done   chan struct{}
	err    error
}

func (r *redriveResult) line() string {
	n := 0
	for _, c := range r.resets {
		n += c
	}
	return fmt.Sprintf("chaos: redrive: parked=%d runs=%d moved=%d records_reset=%d completed=%d held=%d taken=%d newer=%d failed=%d",
		r.parked, r.runs, r.moved, n, r.completed, r.held, r.taken, r.newer, r.faild)
}

var (
	summaryRE = regexp.MustCompile(`(\d+) looked at: moved (\d+), (\d+) completed \(not re-run\), (\d+) held by a worker, (\d+) passed over by the filter, (\d+) moved by another run, (\d+) failed, (\d+) newer`)
	resetRE   = regexp.MustCompile(`msg="redrive: moved" .*key_hash=([0-9a-f]{12}) .*why="record reset"`)
)

// redriveArgs are onceq redrive's flags for the run's dead-letter queue.
func redriveArgs(cfg settings, idem string, b *sqsBroker) []string {
	args := []string{"redrive", "-table", idem}
	if cfg.store == "postgres" {
		args = append(args, "-store", "postgres", "-postgres-url", cfg.postgresURL)
	}
	return append(args, "-sqs-dlq", b.dlqURL, "-sqs-source", b.queueURL, "-remove-completed", "-hold", "30s", "-progress", "0")
}

// redriveOnce runs onceq redrive once and returns its summary line and
// the resets it logged, by key_hash.
func redriveOnce(ctx context.Context, onceqBin string, args []string, cfg settings) (string, map[string]int, error) {
	cmd := exec.CommandContext(ctx, onceqBin, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// The redrive reads and resets records straight in DynamoDB, past the
	// workers' fault proxy.
	cmd.Env = append(os.Environ(), "AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_ENDPOINT_URL_SQS="+cfg.sqsURL, "AWS_ENDPOINT_URL_DYNAMODB="+cfg.dynamoDBURL)
	if err := cmd.Run(); err != nil {
		return out.String(), nil, fmt.Errorf("onceq redrive: %w: %s%s", err, out.String(), lastLines(errOut.Bytes(), 3))
	}
	resets := map[string]int{}
	for _, m := range resetRE.FindAllStringSubmatch(errOut.String(), -1) {
		resets[m[1]]++
	}
	return out.String(), resets, nil
}

// redrives runs onceq redrive on the dead-letter queue after delay: two
// at once, then one more a while after both ended (by when the workers
// have dead-lettered more, among them letters the first two moved back),
// while the workers are being killed. It closes r.done when the three
// have ended.
func redrives(ctx context.Context, onceqBin string, args []string, cfg settings, delay time.Duration, logf func(string, ...any), r *redriveResult) {
	defer close(r.done)
	select {
	case <-ctx.Done():
		r.err = ctx.Err()
		return
	case <-time.After(delay):
	}
	tally := func(out string, resets map[string]int, err error) {
		r.runs++
		for k, v := range resets {
			r.resets[k] += v
		}
		if err != nil && r.err == nil {
			r.err = err
		}
		m := summaryRE.FindStringSubmatch(out)
		if m == nil {
			return
		}
		var n [8]int
		for i := range n {
			fmt.Sscan(m[i+1], &n[i])
		}
		r.moved += n[1]
		r.completed += n[2]
		r.held += n[3]
		r.passed += n[4]
		r.taken += n[5]
		r.faild += n[6]
		r.newer += n[7]
		logf("redrive run %d: %s", r.runs, strings.TrimSpace(out))
	}
	var wg sync.WaitGroup
	var outs [2]string
	var resets [2]map[string]int
	var errs [2]error
	for i := range 2 {
		wg.Go(func() { outs[i], resets[i], errs[i] = redriveOnce(ctx, onceqBin, args, cfg) })
	}
	wg.Wait()
	for i := range 2 {
		tally(outs[i], resets[i], errs[i])
	}
	select {
	case <-ctx.Done():
		r.err = ctx.Err()
		return
	case <-time.After(5 * delay):
	}
	tally(redriveOnce(ctx, onceqBin, args, cfg))
}

// redriveLeft is left, plus one while r's redrives run.
func redriveLeft(left func(context.Context) (int, string, error), r *redriveResult) func(context.Context) (int, string, error) {
	return func(ctx context.Context) (int, string, error) {
		n, desc, err := left(ctx)
		select {
		case <-r.done:
		default:
			n, desc = n+1, desc+", redrives running"
		}
		return n, desc, err
	}
}
