package awstest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"
)

// IAMRecorder records, per resource (table or queue name), every IAM
// action the AWS calls made through its APIOption need: a transaction's
// items each their own action, a batch the action of its single form.
type IAMRecorder struct {
	mu  sync.Mutex
	got map[string]map[string]bool
}

// NewIAMRecorder is an empty recorder.
func NewIAMRecorder() *IAMRecorder { return &IAMRecorder{got: map[string]map[string]bool{}} }

// Actions returns the actions recorded, sorted, by resource, and forgets them.
func (a *IAMRecorder) Actions() map[string][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string][]string{}
	for r, as := range a.got {
		for x := range as {
			out[r] = append(out[r], x)
		}
		slices.Sort(out[r])
	}
	a.got = map[string]map[string]bool{}
	return out
}

func (a *IAMRecorder) add(resource, action string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.got[resource] == nil {
		a.got[resource] = map[string]bool{}
	}
	a.got[resource][action] = true
}

// APIOption is the middleware to give an AWS client (config.WithAPIOptions).
func (a *IAMRecorder) APIOption(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("recordIAMActions",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			a.record(strings.ToLower(awsmiddleware.GetServiceID(ctx)), awsmiddleware.GetOperationName(ctx), in.Parameters)
			return next.HandleInitialize(ctx, in)
		}), middleware.Before)
}

var singular = map[string]string{"DeleteMessageBatch": "DeleteMessage", "ChangeMessageVisibilityBatch": "ChangeMessageVisibility", "SendMessageBatch": "SendMessage"}

func (a *IAMRecorder) record(service, op string, params any) {
	switch in := params.(type) {
	case *ddb.TransactWriteItemsInput:
		for _, it := range in.TransactItems {
			switch {
			case it.Put != nil:
				a.add(aws.ToString(it.Put.TableName), "dynamodb:PutItem")
			case it.Update != nil:
				a.add(aws.ToString(it.Update.TableName), "dynamodb:UpdateItem")
			case it.Delete != nil:
				a.add(aws.ToString(it.Delete.TableName), "dynamodb:DeleteItem")
			case it.ConditionCheck != nil:
				a.add(aws.ToString(it.ConditionCheck.TableName), "dynamodb:ConditionCheckItem")
			}
		}
		return
	case *awssqs.GetQueueUrlInput:
		a.add(aws.ToString(in.QueueName), "sqs:GetQueueUrl")
		return
	}
	if s, ok := singular[op]; ok {
		op = s
	}
	// Every table and queue input names its resource in one of these.
	var f struct{ TableName, QueueUrl *string }
	if b, err := json.Marshal(params); err == nil {
		_ = json.Unmarshal(b, &f)
	}
	resource := aws.ToString(f.TableName)
	if u := aws.ToString(f.QueueUrl); u != "" {
		resource = u[strings.LastIndexByte(u, '/')+1:]
	}
	a.add(resource, service+":"+op)
}
