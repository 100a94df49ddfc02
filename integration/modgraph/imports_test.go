package modgraph

import (
	"slices"
	"strings"
	"testing"
)

// inGraph fails the test unless every module of want is in mods: a check
// of what is absent proves nothing if the user's graph lost its subject.
func inGraph(t *testing.T, mods []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(mods, w) {
			t.Fatalf("the graph lacks %s, which the user imports: has the check lost its subject? %v", w, mods)
		}
	}
}

// under reports whether module is prefix or a module below it.
func under(module, prefix string) bool {
	return module == prefix || strings.HasPrefix(module, prefix+"/")
}

// A user of the kafka-go source inherits nothing of franz-go: neither the
// client nor its in-memory broker (kfake) nor its protocol module, which
// only the tests that steer a broker need, and they live elsewhere. So
// does a Kafka Lambda function, whose handler is kafka-go's.
func TestKafkaGoUserWithoutFranz(t *testing.T) {
	for _, user := range []struct {
		name    string
		modules []string
		imports []string
	}{
		{"kafkasource", []string{"", "sources/kafkasource"},
			[]string{"github.com/onceq/onceq/consumer", "github.com/onceq/onceq/sources/kafkasource"}},
		{"kafkalambda", []string{"", "dedup/dynamostore", "lambda/kafkalambda", "sources/kafkasource"},
			[]string{"github.com/aws/aws-lambda-go/lambda", "github.com/onceq/onceq/dedup/dynamostore", "github.com/onceq/onceq/lambda/kafkalambda"}},
	} {
		t.Run(user.name, func(t *testing.T) {
			u := newUserModule(t, user.modules, user.imports...)
			mods := u.modules()
			inGraph(t, mods, "github.com/onceq/onceq/sources/kafkasource", "github.com/segmentio/kafka-go")
			for _, m := range mods {
				if under(m, "github.com/twmb/franz-go") {
					t.Errorf("a user module importing %v lists %s", user.imports, m)
				}
			}
			t.Logf("%d modules in the user's graph", len(mods))
		})
	}
}

// A user of SQS with PostgreSQL inherits no DynamoDB SDK and not the
// DynamoDB store: only the tests that run the SQS source against that
// store need them, and they live elsewhere.
func TestSQSPostgresUserWithoutDynamoDB(t *testing.T) {
	u := newUserModule(t, []string{"", "sources/sqssource", "dedup/pgstore"},
		"github.com/onceq/onceq/consumer", "github.com/onceq/onceq/sources/sqssource", "github.com/onceq/onceq/dedup/pgstore")
	mods := u.modules()
	inGraph(t, mods, "github.com/onceq/onceq/sources/sqssource", "github.com/onceq/onceq/dedup/pgstore",
		"github.com/aws/aws-sdk-go-v2/service/sqs", "github.com/jackc/pgx/v5")
	for _, m := range mods {
		// dynamodbstreams too: every module whose path begins so.
		if strings.HasPrefix(m, "github.com/aws/aws-sdk-go-v2/service/dynamodb") || m == "github.com/onceq/onceq/dedup/dynamostore" {
			t.Errorf("a user module importing consumer, sqssource and pgstore lists %s", m)
		}
	}
	t.Logf("%d modules in the user's graph", len(mods))
}

// A user of franz-go with Redis inherits no AWS module and no pgx.
func TestFranzRedisUserWithoutAWSOrPgx(t *testing.T) {
	u := newUserModule(t, []string{"", "sources/franzsource", "dedup/redisstore"},
		"github.com/onceq/onceq/consumer", "github.com/onceq/onceq/sources/franzsource", "github.com/onceq/onceq/dedup/redisstore")
	mods := u.modules()
	inGraph(t, mods, "github.com/onceq/onceq/sources/franzsource", "github.com/onceq/onceq/dedup/redisstore",
		"github.com/twmb/franz-go", "github.com/redis/go-redis/v9")
	for _, m := range mods {
		if strings.HasPrefix(m, "github.com/aws/") || under(m, "github.com/jackc/pgx") {
			t.Errorf("a user module importing consumer, franzsource and redisstore lists %s", m)
		}
	}
	t.Logf("%d modules in the user's graph", len(mods))
}
