package dynamostore_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup/dynamostore"
)

// The store names its table and where its client sends requests, for log
// lines about it, and never a credential an endpoint URL carries.
func TestStringNamesTableAndEndpoint(t *testing.T) {
	for _, c := range []struct {
		opts ddb.Options
		want string
	}{
		{ddb.Options{Region: "eu-west-1"}, "DynamoDB table orders-idem (region eu-west-1)"},
		{ddb.Options{Region: "us-east-1", BaseEndpoint: aws.String("http://user:secret@127.0.0.1:8000")}, "DynamoDB table orders-idem (http://127.0.0.1:8000)"},
	} {
		s, err := dynamostore.New(ddb.New(c.opts), dynamostore.WithTable("orders-idem"))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.String(); got != c.want || strings.Contains(got, "secret") {
			t.Errorf("String() = %q, want %q", got, c.want)
		}
	}
}
