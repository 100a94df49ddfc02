package main

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// localAWS points the CLI's standard SDK settings at DynamoDB Local, as an
// operator would with AWS_ENDPOINT_URL_DYNAMODB, and returns a client for
// the test's own checks.
func localAWS(t *testing.T) *ddb.Client {
	ep := testenv.DynamoDBEndpoint(t)
	dir := t.TempDir()
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", ep)
	t.Setenv("AWS_REGION", testenv.Region)
	t.Setenv("AWS_ACCESS_KEY_ID", testenv.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", testenv.SecretAccessKey)
	t.Setenv("AWS_PROFILE", "")
	// No shared files: the machine's own profiles must not leak in.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	cfg := awstest.Config(t, ep)
	return ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(ep) })
}

func tableName(t *testing.T) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "onceq_cli_" + hex.EncodeToString(b)
}

func TestCreateTable(t *testing.T) {
	c := localAWS(t)
	for _, tenant := range []bool{false, true} {
		table := tableName(t)
		args := []string{"create-table", "-table", table}
		if tenant {
			args = append(args, "-tenant-layout")
		}
		code, out, errOut := onceq(args...)
		if code != 0 || !strings.Contains(out, table) {
			t.Fatalf("%v: exit %d, out %q, err %q", args, code, out, errOut)
		}
		d, err := c.DescribeTable(t.Context(), &ddb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if bm := d.Table.BillingModeSummary; bm == nil || bm.BillingMode != types.BillingModePayPerRequest {
			t.Errorf("%v: billing %+v, want on-demand", args, bm)
		}
		if want := map[bool]int{false: 1, true: 2}[tenant]; len(d.Table.KeySchema) != want {
			t.Errorf("%v: key schema %d elements, want %d", args, len(d.Table.KeySchema), want)
		}
		ttl, err := c.DescribeTimeToLive(t.Context(), &ddb.DescribeTimeToLiveInput{TableName: aws.String(table)})
		if err != nil {
			t.Fatal(err)
		}
		if d := ttl.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "expires_at" || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
			t.Errorf("%v: TTL %+v, want enabled on expires_at", args, d)
		}
		// Idempotent: a second run on the existing table is ok.
		if code, _, errOut := onceq(args...); code != 0 {
			t.Errorf("%v again: exit %d, err %q", args, code, errOut)
		}
	}
}

func TestCreateTableLayoutMismatch(t *testing.T) {
	localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	code, _, errOut := onceq("create-table", "-table", table, "-tenant-layout")
	if code != 1 || !strings.Contains(errOut, "key schema") {
		t.Fatalf("existing table of the other layout: exit %d, err %q; want exit 1 about the key schema", code, errOut)
	}
}

// pendingRecord is a table made by create-table and a PENDING record in
// it, for inspect to read.
type pendingRecord struct {
	table, key string // the stored key
	store      *dynamostore.Store
	claim      dedup.Claim
	now        time.Time // the claim's
}

// newPendingRecord creates a table (in the tenant layout if tenant) and
// claims the key of id in namespace ns there for lease, as owner would.
func newPendingRecord(t *testing.T, tenant bool, ns, id, owner string, body []byte, lease time.Duration) pendingRecord {
	t.Helper()
	c := localAWS(t)
	p := pendingRecord{table: tableName(t)}
	args := []string{"create-table", "-table", p.table}
	if tenant {
		args = append(args, "-tenant-layout")
	}
	if code, _, errOut := onceq(args...); code != 0 {
		t.Fatalf("create-table: exit %d: %s", code, errOut)
	}
	var err error
	if p.store, err = openStore(c, p.table, tenant); err != nil {
		t.Fatal(err)
	}
	if p.key, err = dedup.Key(ns, id); err != nil {
		t.Fatal(err)
	}
	p.now = time.Now()
	p.claim, err = p.store.Claim(t.Context(), dedup.ClaimRequest{
		Key: p.key, PayloadHash: dedup.PayloadHash(body), Owner: owner,
		Now: p.now, LeaseUntil: p.now.Add(lease),
	})
	if err != nil || !p.claim.Acquired {
		t.Fatalf("claim: %+v, %v", p.claim, err)
	}
	return p
}

func TestInspect(t *testing.T) {
	p := newPendingRecord(t, false, "orders", "order-42", "worker-a1", []byte("body"), 5*time.Minute)
	table, key, store, claim, now := p.table, p.key, p.store, p.claim, p.now

	code, out, errOut := onceq("inspect", "-table", table, "-namespace", "orders", "order-42")
	if code != 0 {
		t.Fatalf("inspect PENDING: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"key:        " + key, "status:     PENDING", "version:    " + itoa(claim.Lease.Version),
		"attempts:   0", "response:   0 bytes", "owner:      worker-a1",
		now.Add(5 * time.Minute).UTC().Format("2006-01-02T15:04")} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect PENDING lacks %q:\n%s", want, out)
		}
	}

	// Expiry is stored rounded up to the second and read a moment later:
	// within a second either way of 5m.
	if !strings.Contains(out, "(in 5m)") && !strings.Contains(out, "(in 4m59s)") && !strings.Contains(out, "(in 5m1s)") {
		t.Errorf("inspect PENDING: expiry not \"in 5m\":\n%s", out)
	}

	resp := []byte(`{"order":42,"ok":true}`)
	if err := store.Complete(t.Context(), dedup.CompleteRequest{
		Lease: claim.Lease, Response: resp, Now: time.Now(), ExpiresAt: now.Add(48 * time.Hour),
	}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	// The stored key, namespace included, works with -stored-key.
	code, out, errOut = onceq("inspect", "-table", table, "-stored-key", key)
	if code != 0 {
		t.Fatalf("inspect COMPLETED: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"status:     COMPLETED", "version:    " + itoa(claim.Lease.Version+1),
		"response:   " + itoa(int64(len(resp))) + " bytes"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect COMPLETED lacks %q:\n%s", want, out)
		}
	}

	if !strings.Contains(out, "(in 48h)") && !strings.Contains(out, "(in 47h59m59s)") && !strings.Contains(out, "(in 48h0m1s)") {
		t.Errorf("inspect COMPLETED: expiry not \"in 48h\":\n%s", out)
	}

	// The raw key under the wrong namespace is another stored key: not found.
	code, out, errOut = onceq("inspect", "-table", table, "order-42")
	if code != 1 || out != "" || !strings.Contains(errOut, `no record for stored key "onceq#order-42"`) {
		t.Errorf("inspect absent key: exit %d, out %q, err %q; want exit 1 and a clear message", code, out, errOut)
	}
}

func TestInspectMissingTable(t *testing.T) {
	localAWS(t)
	code, _, errOut := onceq("inspect", "-table", tableName(t), "k")
	if code != 1 || !strings.Contains(errOut, "onceq inspect:") {
		t.Fatalf("missing table: exit %d, err %q; want exit 1 with an error", code, errOut)
	}
}

func TestRelative(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cases := []struct {
		d    time.Duration
		want string
	}{
		{5 * time.Minute, "in 5m"},
		{5*time.Minute + 10*time.Second, "in 5m10s"},
		{-2 * time.Minute, "expired 2m ago"},
		{-90 * time.Second, "expired 1m30s ago"},
		{3 * time.Hour, "in 3h"},
		{48*time.Hour + 30*time.Minute, "in 48h30m"},
		{400 * time.Millisecond, "expires now"},
		{7 * time.Second, "in 7s"},
	}
	for _, c := range cases {
		if got := relative(now.Add(c.d), now); got != c.want {
			t.Errorf("relative(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestInspectTenantLayout(t *testing.T) {
	p := newPendingRecord(t, true, "tenant-7", "msg-1", "w1", []byte("b"), time.Minute)
	table, key := p.table, p.key
	code, out, errOut := onceq("inspect", "-table", table, "-tenant-layout", "-namespace", "tenant-7", "msg-1")
	if code != 0 || !strings.Contains(out, "status:     PENDING") || !strings.Contains(out, "key:        "+key) {
		t.Fatalf("inspect: exit %d, out %q, err %q", code, out, errOut)
	}
	// Read with the wrong layout, the key does not fit the table's schema.
	if code, _, errOut := onceq("inspect", "-table", table, "-namespace", "tenant-7", "msg-1"); code != 1 || errOut == "" {
		t.Errorf("inspect without -tenant-layout: exit %d, err %q; want exit 1 with an error", code, errOut)
	}
}

// inspect -tenant lists a tenant's records (a Query), and only that
// tenant's.
func TestInspectTenantQuery(t *testing.T) {
	c := localAWS(t)
	table := tableName(t)
	if code, _, errOut := onceq("create-table", "-table", table, "-tenant-layout"); code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	st, err := dynamostore.New(c, dynamostore.WithTable(table), dynamostore.TenantLayout(), dynamostore.TenantShards(2))
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range [][2]string{{"acme", "a1"}, {"acme", "a2"}, {"zeta", "z1"}} {
		now := time.Now() // read per claim, as a consumer does
		key, err := dedup.TenantKey(tk[0], "onceq#"+tk[1])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(t.Context(), dedup.ClaimRequest{Key: key, Owner: "o", Now: now, LeaseUntil: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := onceq("inspect", "-table", table, "-tenant", "acme", "-since", "1h", "-shards", "2")
	if code != 0 || strings.Count(out, "status:") != 2 || strings.Contains(out, "z1") || !strings.Contains(errOut, "2 records") {
		t.Fatalf("inspect -tenant acme: exit %d, out %q, err %q", code, out, errOut)
	}
	if code, _, _ := onceq("inspect", "-table", table, "-tenant", "acme", "-since", "1h", "KEY"); code != 2 {
		t.Errorf("-tenant -since with a KEY: exit %d, want 2", code)
	}
}
