package dynamodb_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamodb"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testenv"
)

func client(t *testing.T) *ddb.Client {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	cfg := testenv.AWSConfig(t, ep)
	return ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
}

func newTable(t *testing.T, c *ddb.Client, opts ...dynamodb.TableOption) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "onceq_test_" + hex.EncodeToString(b)
	if err := dynamodb.CreateTable(context.Background(), c, name, opts...); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return name
}

func TestConformance(t *testing.T) {
	c := client(t)
	table := newTable(t, c)
	storetest.Run(t, func(*testing.T) dedup.Store { return dynamodb.New(c, table) })
}

func TestConformanceTenantLayout(t *testing.T) {
	c := client(t)
	table := newTable(t, c, dynamodb.WithTenantLayout())
	storetest.Run(t, func(*testing.T) dedup.Store { return dynamodb.New(c, table, dynamodb.WithTenantLayout()) },
		storetest.Options{RaceGoroutines: 16, RaceRounds: 20})
}
