package awslambda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/testenv"
)

// RIEEnv names the runtime interface emulator binary; without it the test
// looks on PATH and in the Go bin directory. integration/servers.sh
// installs it.
const RIEEnv = "ONCEQ_LAMBDA_RIE"

var bootstrapPath string // built once by TestMain

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "awslambda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bootstrapPath = filepath.Join(dir, "bootstrap")
	build := exec.Command("go", "build", "-o", bootstrapPath, "./internal/testfunc")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the test function: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func findRIE(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(RIEEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("aws-lambda-rie"); err == nil {
		return p
	}
	if p, err := filepath.Abs("../../.bin/aws-lambda-rie"); err == nil { // where servers.sh installs it
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	gopath, err := exec.Command("go", "env", "GOPATH").Output()
	if err == nil {
		p := filepath.Join(strings.TrimSpace(strings.Split(string(gopath), string(os.PathListSeparator))[0]), "bin", "aws-lambda-rie")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	const how = "install it with `go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d` (integration/servers.sh start does)"
	if os.Getenv("CI") == "true" {
		t.Fatalf("aws-lambda-rie not found; under CI=true that is a failure: %s", how)
	}
	t.Skipf("aws-lambda-rie not found: %s", how)
	return ""
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// function is the test function running under its own emulator.
type function struct {
	t    testing.TB
	url  string
	logs string
}

// startFunction runs the test function under the emulator, on loopback
// ports of its own, with env added to the environment; timeout is the
// function's timeout in whole seconds.
func startFunction(t testing.TB, timeout int, env map[string]string) *function {
	t.Helper()
	rie := findRIE(t)
	api, emu := freeAddr(t), freeAddr(t)
	cmd := exec.Command(rie, bootstrapPath, "--runtime-interface-emulator-address", emu, "--runtime-api-address", api)
	cmd.Env = append(os.Environ(), fmt.Sprintf("AWS_LAMBDA_FUNCTION_TIMEOUT=%d", timeout))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logs := filepath.Join(t.TempDir(), "function.log")
	out, err := os.Create(logs)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // the emulator and the function it starts
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the emulator: %v", err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = out.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logs)
			t.Logf("function log:\n%s", b)
		}
	})
	testenv.Eventually(t, 10*time.Second, "the emulator listens on "+emu, func() bool {
		c, err := net.Dial("tcp", emu)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return &function{t: t, url: "http://" + emu + "/2015-03-31/functions/function/invocations", logs: logs}
}

// invocation is what one invocation answered.
type invocation struct {
	body     []byte
	timedOut bool
	// errMessage is the function's error, when it returned one.
	errMessage string
}

func (f *function) invoke(ctx context.Context, event any) invocation {
	f.t.Helper()
	payload, err := json.Marshal(event)
	if err != nil {
		f.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.url, bytes.NewReader(payload))
	if err != nil {
		f.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatalf("invoke: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("invoke: read: %v", err)
	}
	inv := invocation{body: body}
	if bytes.HasPrefix(body, []byte("Task timed out")) {
		inv.timedOut = true
		return inv
	}
	var fe struct {
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(body, &fe) == nil && fe.ErrorMessage != "" {
		inv.errMessage = fe.ErrorMessage
		return inv
	}
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("invoke: HTTP %d: %s", resp.StatusCode, body)
	}
	return inv
}

// tables creates an idempotency table and an effects table.
type tables struct {
	client            *ddb.Client
	endpoint          string
	idempotency, effs string
}

func newTables(t testing.TB) *tables {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	client := ddb.NewFromConfig(testenv.AWSConfig(t, ep))
	ctx := testenv.Context(t, time.Minute)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	tb := &tables{client: client, endpoint: ep, idempotency: "lambda-idem-" + suffix, effs: "lambda-effects-" + suffix}
	if err := dynamostore.CreateTable(ctx, client, tb.idempotency); err != nil {
		t.Fatalf("create table: %v", err)
	}
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(tb.effs),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create effects table: %v", err)
	}
	return tb
}

func (tb *tables) env() map[string]string {
	return map[string]string{"TESTFUNC_DDB_ENDPOINT": tb.endpoint, "TESTFUNC_TABLE": tb.idempotency, "TESTFUNC_EFFECTS": tb.effs}
}

// effects reads how often each id's effect was applied.
func (tb *tables) effects(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	p := ddb.NewScanPaginator(tb.client, &ddb.ScanInput{TableName: aws.String(tb.effs), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("scan effects: %v", err)
		}
		for _, it := range page.Items {
			id := it["id"].(*types.AttributeValueMemberS).Value
			if _, counted := it["n"]; !counted {
				continue // a marker of the test function's own
			}
			var n int
			_, _ = fmt.Sscan(it["n"].(*types.AttributeValueMemberN).Value, &n)
			out[id] = n
		}
	}
	return out
}
