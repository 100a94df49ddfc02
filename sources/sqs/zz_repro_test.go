package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/sources/sourcetest"
)

func TestZZRepro(t *testing.T) {
	c := client(t)
	url, _ := createQueue(t, c, queueSpec{visibility: 30 * time.Second})
	var msgs []sourcetest.Outgoing
	for i := range 5000 {
		msgs = append(msgs, sourcetest.Outgoing{Body: []byte(fmt.Sprintf(`{"order":"order-%05d"}`, i)), Attributes: map[string]string{"idempotency-key": strconv.Itoa(i)}})
	}
	if err := sendBatch(context.Background(), c, url, false, msgs); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
					MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{"All"}}, func(o *awssqs.Options) { o.Retryer = aws.NopRetryer{} })
				if err != nil {
					for e := err; e != nil; e = errors.Unwrap(e) {
						t.Logf("%T: %v", e, e)
					}
					continue
				}
				if len(out.Messages) == 0 {
					return
				}
				in := &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url)}
				for i, m := range out.Messages {
					in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				if _, err := c.DeleteMessageBatch(context.Background(), in); err != nil {
					t.Log(err)
				}
			}
		}()
	}
	wg.Wait()
}
