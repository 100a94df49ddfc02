package awstest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
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

// transactActions is the action each kind of transaction item needs.
var transactActions = map[string]string{"Put": "dynamodb:PutItem", "Update": "dynamodb:UpdateItem", "Delete": "dynamodb:DeleteItem", "ConditionCheck": "dynamodb:ConditionCheckItem"}

var singular = map[string]string{"DeleteMessageBatch": "DeleteMessage", "ChangeMessageVisibilityBatch": "ChangeMessageVisibility", "SendMessageBatch": "SendMessage"}

func (a *IAMRecorder) record(service, op string, params any) {
	// The inputs are read through their JSON form, not their types, so that
	// a test of one service's code does not import the other service's SDK.
	var f struct {
		TableName, QueueUrl, QueueName *string
		TransactItems                  []map[string]*struct{ TableName *string }
	}
	if b, err := json.Marshal(params); err == nil {
		_ = json.Unmarshal(b, &f)
	}
	switch {
	case service == "dynamodb" && op == "TransactWriteItems":
		for _, it := range f.TransactItems {
			for kind, action := range transactActions {
				if it[kind] != nil {
					a.add(aws.ToString(it[kind].TableName), action)
				}
			}
		}
		return
	case service == "sqs" && op == "GetQueueUrl":
		a.add(aws.ToString(f.QueueName), "sqs:GetQueueUrl")
		return
	}
	if s, ok := singular[op]; ok {
		op = s
	}
	// Every table and queue input names its resource in one of these.
	resource := aws.ToString(f.TableName)
	if u := aws.ToString(f.QueueUrl); u != "" {
		resource = u[strings.LastIndexByte(u, '/')+1:]
	}
	a.add(resource, service+":"+op)
}
