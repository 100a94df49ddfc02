package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// create-table -stream -archive makes both tables, the stream with both
// images; onceq audit then archives a removed COMPLETED record until
// interrupted.
func TestCreateTableStreamAndAudit(t *testing.T) {
	c := localAWS(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", testenv.DynamoDBEndpoint(t))
	table, archive := tableName(t), tableName(t)
	if code, out, errOut := onceq("create-table", "-table", table, "-stream", "-archive", archive); code != 0 || !strings.Contains(out, "stream NEW_AND_OLD_IMAGES") {
		t.Fatalf("create-table: exit %d, out %q, err %q", code, out, errOut)
	}
	d, err := c.DescribeTable(t.Context(), &ddb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if s := d.Table.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) || s.StreamViewType != types.StreamViewTypeNewAndOldImages {
		t.Fatalf("stream %+v, want NEW_AND_OLD_IMAGES", s)
	}
	if _, err := c.DescribeTable(t.Context(), &ddb.DescribeTableInput{TableName: aws.String(archive)}); err != nil {
		t.Fatalf("archive table: %v", err)
	}

	st, err := dynamostore.New(c, dynamostore.WithTable(table), dynamostore.WithoutClockCheck())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	key := "cli#" + table
	cl, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)})
	if err != nil || !cl.Acquired {
		t.Fatalf("claim: %+v %v", cl, err)
	}
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: cl.Lease, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	pk := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: key}}
	if _, err := c.DeleteItem(t.Context(), &ddb.DeleteItemInput{TableName: aws.String(table), Key: pk}); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan int, 1)
	var out, errOut testenv.LogBuffer
	go func() {
		done <- run(ctx, []string{"audit", "-table", table, "-archive", archive, "-from-start", "-any-delete", "-poll", "50ms",
			"-metrics-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	testenv.Eventually(t, 20*time.Second, "onceq audit archived the removed completion", func() bool {
		o, err := c.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(archive), Key: pk, ConsistentRead: aws.Bool(true)})
		return err == nil && len(o.Item) > 0
	})
	// The counters follow the archive's write: read them until they do.
	var metrics string
	testenv.Eventually(t, 20*time.Second, "onceq audit's metrics count the tombstone and its TTL lag", func() bool {
		_, url, ok := strings.Cut(out.String(), "metrics on ")
		if !ok {
			return false
		}
		resp, err := http.Get(strings.TrimSpace(strings.SplitN(url, "\n", 2)[0]))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		metrics = string(body)
		for _, name := range []string{"onceq_dynamodb_tombstones_total", "onceq_dynamodb_ttl_lag_seconds_count"} {
			found := false
			for _, line := range strings.Split(metrics, "\n") {
				found = found || strings.HasPrefix(line, name+"{") && strings.HasSuffix(line, "} 1")
			}
			if !found {
				return false
			}
		}
		return true
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("audit: exit %d, err %q", code, errOut.String())
	}
	if code, _, _ := onceq("audit", "-table", table); code != 2 {
		t.Errorf("audit without -archive: exit %d, want 2", code)
	}
}

// onceq audit checks its archive table before it reads: a missing one is
// exit 1 at once, naming it (it used to read the stream on, archiving
// nothing). Its help says what -any-delete is for: DynamoDB Local runs
// TTL, without the identity AWS gives its deletes.
func TestAuditChecksArchiveAtStart(t *testing.T) {
	localAWS(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB_STREAMS", testenv.DynamoDBEndpoint(t))
	table, archive := tableName(t), tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table, "-stream"); code != 0 {
		t.Fatalf("create-table: exit %d: %s", code, errOut)
	}
	// Bounded, so that a reader that does not check returns (exit 0).
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var out, errOut testenv.LogBuffer
	code := run(ctx, []string{"audit", "-table", table, "-archive", archive}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "archive table "+archive) || ctx.Err() != nil {
		t.Fatalf("audit with a missing archive: exit %d (context %v), stderr %q; want exit 1 at once, naming the archive", code, ctx.Err(), errOut.String())
	}
	_, _, help := onceq("audit", "-h")
	if !strings.Contains(help, "DynamoDB Local") || strings.Contains(help, "does not run") {
		t.Errorf("audit help on -any-delete: %s", help)
	}
}
