package testenv

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"
)

// Environment variables written by integration/servers.sh into integration/.run/env.
const (
	DynamoDBEndpointEnv = "ONCEQ_DYNAMODB_ENDPOINT"
	SQSEndpointEnv      = "ONCEQ_SQS_ENDPOINT"
	// DynamoDB2EndpointEnv is a second DynamoDB Local, a second "region".
	DynamoDB2EndpointEnv = "ONCEQ_DYNAMODB2_ENDPOINT"
	PostgresURLEnv       = "ONCEQ_POSTGRES_URL"
	RedisAddrEnv         = "ONCEQ_REDIS_ADDR"
	KafkaBrokersEnv      = "ONCEQ_KAFKA_BROKERS"
)

// Region and credentials the local servers are used with.
const (
	Region          = "us-east-1"
	AccessKeyID     = "test"
	SecretAccessKey = "test"
)

const howToStart = "start the servers with `bash integration/servers.sh start` " +
	"and load their endpoints with `set -a; . integration/.run/env; set +a`"

// DynamoDBEndpoint returns the DynamoDB Local endpoint (http://127.0.0.1:PORT)
// from ONCEQ_DYNAMODB_ENDPOINT. When it is unset the test is skipped, or
// fails when CI=true.
func DynamoDBEndpoint(t testing.TB) string {
	t.Helper()
	return endpoint(t, DynamoDBEndpointEnv, "DynamoDB Local")
}

// DynamoDB2Endpoint returns the second DynamoDB Local's endpoint, which
// Global Tables tests use as a second region, from
// ONCEQ_DYNAMODB2_ENDPOINT. When it is unset the test is skipped, or fails
// when CI=true.
func DynamoDB2Endpoint(t testing.TB) string {
	t.Helper()
	return endpoint(t, DynamoDB2EndpointEnv, "a second DynamoDB Local")
}

// SQSEndpoint returns the fauxqs SQS endpoint (http://127.0.0.1:PORT) from
// ONCEQ_SQS_ENDPOINT. When it is unset the test is skipped, or fails when
// CI=true.
func SQSEndpoint(t testing.TB) string {
	t.Helper()
	return endpoint(t, SQSEndpointEnv, "the SQS emulator (fauxqs)")
}

// PostgresURL returns the PostgreSQL connection URL from ONCEQ_POSTGRES_URL.
// When it is unset the test is skipped, or fails when CI=true.
func PostgresURL(t testing.TB) string {
	t.Helper()
	return endpoint(t, PostgresURLEnv, "PostgreSQL")
}

// RedisAddr returns the Redis address (127.0.0.1:PORT) from
// ONCEQ_REDIS_ADDR. When it is unset the test is skipped, or fails when
// CI=true.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return endpoint(t, RedisAddrEnv, "Redis")
}

// KafkaBrokers returns the Kafka broker's address (127.0.0.1:PORT) from
// ONCEQ_KAFKA_BROKERS. When it is unset the test is skipped, or fails
// when CI=true.
func KafkaBrokers(t testing.TB) string {
	t.Helper()
	return endpoint(t, KafkaBrokersEnv, "a Kafka broker")
}

func endpoint(t testing.TB, env, what string) string {
	t.Helper()
	if ep := os.Getenv(env); ep != "" {
		return ep
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is not set, so this test cannot reach %s; under CI=true that is a failure: %s",
			env, what, howToStart)
	}
	t.Skipf("%s is not set (needs %s); to run this test, %s", env, what, howToStart)
	return ""
}

// Context returns a context that ends after d, or when the test ends.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Eventually polls cond every 20ms until it holds, and fails the test with
// what if d passes first.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// LogEnv, when set, sends test logs to stderr: at the level it names
// ("debug", "info", "warn", "error"), or at debug for any other value.
const LogEnv = "ONCEQ_TEST_LOG"

// Logger discards, unless LogEnv is set; then it writes text to stderr,
// each record tagged with the test's name. Stderr rather than the test's
// own output: a source's goroutines may log after the test has ended.
func Logger(t testing.TB) *slog.Logger {
	v := os.Getenv(LogEnv)
	if v == "" {
		return slog.New(slog.DiscardHandler)
	}
	level := slog.LevelDebug
	_ = level.UnmarshalText([]byte(v)) // not a level name: stay at debug
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("test", t.Name())
}
