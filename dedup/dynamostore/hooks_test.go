package dynamostore_test

import (
	"errors"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup/dynamostore"
)

type notAHook struct{}

// Misspelt on purpose: it implements none of the hook interfaces.
func (notAHook) OnRetried() {}

// A hook implementing no hook interface, and a store with nothing to
// work on, are configuration errors, not silence.
func TestNewRefusesBadConfig(t *testing.T) {
	c := ddb.New(ddb.Options{Region: "us-east-1"})
	for name, tc := range map[string]struct {
		client *ddb.Client
		table  string
		opts   []dynamostore.Option
	}{
		"hook implementing nothing": {c, "t", []dynamostore.Option{dynamostore.WithHooks(notAHook{})}},
		"nil hook":                  {c, "t", []dynamostore.Option{dynamostore.WithHooks(nil)}},
		"no table":                  {c, "", nil},
		"no client":                 {nil, "t", nil},
		"nil regional client":       {nil, "t", []dynamostore.Option{dynamostore.WithRegionalClients([]*ddb.Client{c, nil})}},
		"response over an item":     {c, "t", []dynamostore.Option{dynamostore.MaxResponseSize(400*1024 + 1)}},
	} {
		if st, err := dynamostore.New(tc.client, append([]dynamostore.Option{dynamostore.WithTable(tc.table)}, tc.opts...)...); !errors.Is(err, dynamostore.ErrInvalidConfig) || st != nil {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if _, err := dynamostore.New(c, dynamostore.WithTable("t"), dynamostore.WithHooks(onRetry(nil), onCall(nil))); err != nil {
		t.Fatalf("good hooks refused: %v", err)
	}
}
