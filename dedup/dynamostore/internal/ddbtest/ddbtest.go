// Package ddbtest holds the test helpers that the DynamoDB store's tests
// and its auditor's share: fresh tables, stores and unique names. Only
// tests import it.
package ddbtest

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
)

// UniqueName is prefix and ten random hex digits.
func UniqueName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// UniqueKey is a key no other test uses.
func UniqueKey() string { return "test#" + UniqueName("k-") }

// RecordsTable makes a fresh records table.
func RecordsTable(t testing.TB, client *ddb.Client, opts ...dynamostore.TableOption) string {
	t.Helper()
	name := UniqueName("onceq_rec_")
	if err := dynamostore.CreateTable(t.Context(), client, name, opts...); err != nil {
		t.Fatalf("create table: %v", err)
	}
	return name
}

// NewStore is dynamostore.New for tests: a configuration error fails the
// test. Its clock check is off, since most tests drive claims with a clock
// of their own; a test of the check turns it on.
func NewStore(t testing.TB, client *ddb.Client, table string, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	st, err := dynamostore.New(client, append([]dynamostore.Option{dynamostore.WithTable(table), dynamostore.WithoutClockCheck()}, opts...)...)
	if err != nil {
		t.Fatalf("dynamostore.New: %v", err)
	}
	return st
}

// MustClaim is st.Claim(req), whose error fails the test.
func MustClaim(t testing.TB, st dedup.Store, req dedup.ClaimRequest) dedup.Claim {
	t.Helper()
	c, err := st.Claim(t.Context(), req)
	if err != nil {
		t.Fatalf("claim %s: %v", req.Key, err)
	}
	return c
}
