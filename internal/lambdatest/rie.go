// Package lambdatest runs a Lambda function under AWS's runtime interface
// emulator for the tests of the Lambda handler packages (lambda/sqslambda,
// lambda/kafkalambda); the function's handler is package testfn. Only
// tests import it. It imports no Lambda or Kafka package, so the library
// module that holds it requires neither.
package lambdatest

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// RIEEnv names the runtime interface emulator binary; without it the test
// looks on PATH and in the Go bin directory. integration/servers.sh
// installs it.
const RIEEnv = "ONCEQ_LAMBDA_RIE"

// Main builds the test function in pkg (a package path relative to the
// test's directory) once, runs the tests with its path in *bootstrap, and
// returns their exit code: a test package's TestMain is
//
//	func TestMain(m *testing.M) { os.Exit(lambdatest.Main(m, "./internal/testfunc", &bootstrap)) }
//
// Under -short it builds nothing and the tests that run the function skip
// (Start): its build, with cgo off, compiles the AWS SDK anew, minutes on
// a small machine.
func Main(m *testing.M, pkg string, bootstrap *string) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "lambda-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bootstrap = filepath.Join(dir, "bootstrap")
	build := exec.Command("go", "build", "-o", *bootstrap, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the test function: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

func findRIE(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(RIEEnv); p != "" {
		return p
	}
	if p, err := exec.LookPath("aws-lambda-rie"); err == nil {
		return p
	}
	// .bin at the repository's root, where servers.sh installs it: the
	// first parent of the test's directory that has it.
	if dir, err := os.Getwd(); err == nil {
		for ; ; dir = filepath.Dir(dir) {
			p := filepath.Join(dir, ".bin", "aws-lambda-rie")
			if _, err := os.Stat(p); err == nil {
				return p
			}
			if filepath.Dir(dir) == dir {
				break
			}
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

// freeAddr is a loopback address free now, for the emulator to bind. Its
// port is drawn below the kernel's ephemeral range: a port the kernel
// hands to another test's listen on port 0, between this check and the
// emulator's bind, would be taken (the emulator then panics, and a dial
// reaches the other test's listener instead).
func freeAddr(t testing.TB) string {
	t.Helper()
	for range 100 {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000)))
		if l, err := net.Listen("tcp", addr); err == nil {
			_ = l.Close()
			return addr
		}
	}
	t.Fatal("no free port for the emulator in 20000-31999")
	return ""
}

// Function is a test function running under its own emulator.
type Function struct {
	t    testing.TB
	url  string
	logs string // the file the emulator and the function write to
	// Addr is the emulator's host:port, for a test that sends its own
	// request (a documented invocation URL).
	Addr string
}

// Start runs the function built at bootstrap under the emulator, on
// loopback ports of its own, with env added to the environment; timeout is
// the function's timeout in whole seconds.
func Start(t testing.TB, bootstrap string, timeout int, env map[string]string) *Function {
	t.Helper()
	if bootstrap == "" {
		t.Skip("-short: the test function is not built")
	}
	rie := findRIE(t)
	api, emu := freeAddr(t), freeAddr(t)
	cmd := exec.Command(rie, bootstrap, "--runtime-interface-emulator-address", emu, "--runtime-api-address", api)
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
	return &Function{t: t, url: "http://" + emu + "/2015-03-31/functions/function/invocations", Addr: emu, logs: logs}
}

// Log is what the function and the emulator have written so far, for a
// test of what the function logs.
func (f *Function) Log() string {
	f.t.Helper()
	b, err := os.ReadFile(f.logs)
	if err != nil {
		f.t.Fatalf("function log: %v", err)
	}
	return string(b)
}

// Invocation is what one invocation answered.
type Invocation struct {
	Body     []byte
	TimedOut bool
	// ErrMessage is the function's error, when it returned one.
	ErrMessage string
}

// Invoke sends event to the function and returns its answer.
func (f *Function) Invoke(ctx context.Context, event any) Invocation {
	f.t.Helper()
	payload, err := json.Marshal(event)
	if err != nil {
		f.t.Fatal(err)
	}
	// An invocation that reaches the emulator while it still resets the
	// runtime after a timeout is refused before the function runs
	// (Sandbox.Failure, ErrGateCanceled); Lambda's event source mapping
	// sends the batch again, and so does this.
	for range 10 {
		inv := f.invoke(ctx, payload)
		if !strings.Contains(inv.ErrMessage, "ErrGateCanceled") {
			return inv
		}
		select { // the reset's end has no event to wait on
		case <-ctx.Done():
			return inv
		case <-time.After(200 * time.Millisecond):
		}
	}
	return f.invoke(ctx, payload)
}

func (f *Function) invoke(ctx context.Context, payload []byte) Invocation {
	f.t.Helper()
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
	inv := Invocation{Body: body}
	if bytes.HasPrefix(body, []byte("Task timed out")) {
		inv.TimedOut = true
		return inv
	}
	var fe struct {
		ErrorMessage string `json:"errorMessage"`
	}
	if json.Unmarshal(body, &fe) == nil && fe.ErrorMessage != "" {
		inv.ErrMessage = fe.ErrorMessage
		return inv
	}
	if resp.StatusCode != http.StatusOK {
		f.t.Fatalf("invoke: HTTP %d: %s", resp.StatusCode, body)
	}
	return inv
}

// Tables are an idempotency table and an effects table, on DynamoDB Local.
type Tables struct {
	Client   *ddb.Client
	Endpoint string
	// Idempotency is the idempotency table's name, EffectsTable the
	// effects table's (a count per id, see Effects).
	Idempotency, EffectsTable string
}

// NewTables creates them, with names of their own.
func NewTables(t testing.TB) *Tables {
	t.Helper()
	ep := testenv.DynamoDBEndpoint(t)
	client := ddb.NewFromConfig(awstest.Config(t, ep))
	ctx := testenv.Context(t, time.Minute)
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	tb := &Tables{Client: client, Endpoint: ep, Idempotency: "lambda-idem-" + suffix, EffectsTable: "lambda-effects-" + suffix}
	if err := dynamostore.CreateTable(ctx, client, tb.Idempotency); err != nil {
		t.Fatalf("create table: %v", err)
	}
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(tb.EffectsTable),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create effects table: %v", err)
	}
	return tb
}

// Env is the test function's environment for these tables.
func (tb *Tables) Env() map[string]string {
	return map[string]string{"TESTFUNC_DDB_ENDPOINT": tb.Endpoint, "TESTFUNC_TABLE": tb.Idempotency, "TESTFUNC_EFFECTS": tb.EffectsTable}
}

// Effects reads how often each id's effect was applied.
func (tb *Tables) Effects(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	p := ddb.NewScanPaginator(tb.Client, &ddb.ScanInput{TableName: aws.String(tb.EffectsTable), ConsistentRead: aws.Bool(true)})
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
