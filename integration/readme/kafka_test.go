package readme

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The README's first worker on Kafka: the program of "Your first worker"
// with KAFKA_BROKERS set, against the kafkadev broker, fed by the
// "On Kafka" section's own kafkadev produce and read lines. The two copies
// of one order count once; the two malformed records reach orders-dlq,
// each with its reason.
func TestFirstWorkerOnKafkaFromREADME(t *testing.T) {
	dynamoEP := testenv.DynamoDBEndpoint(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(goBlock(t, "## Your first worker")), 0o600); err != nil {
		t.Fatal(err)
	}
	worker, kafkadev := filepath.Join(dir, "first-worker"), filepath.Join(dir, "kafkadev")
	for _, b := range [][]string{{worker, filepath.Join(dir, "main.go")}, {kafkadev, "./examples/kafkadev"}} {
		build := exec.Command("go", "build", "-o", b[0], b[1])
		build.Dir = "../.." // the repository root: the programs build against this tree
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b[1], err, out)
		}
	}

	ctx := testenv.Context(t, 3*time.Minute)
	db := ddb.NewFromConfig(awstest.Config(t, ""), func(o *ddb.Options) { o.BaseEndpoint = aws.String(dynamoEP) })
	if err := dynamostore.CreateTable(ctx, db, "onceq_idempotency"); err != nil {
		t.Fatal(err)
	}
	createTotals(t, ctx, db)

	// The README's broker line, on a free port so runs never collide.
	broker := exec.Command(kafkadev, "broker", "-port", "0", "-topics", "orders,orders-dlq")
	out, err := broker.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = broker.Process.Signal(syscall.SIGTERM); _ = broker.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("kafkadev broker printed no address")
	}
	brokers := strings.TrimSpace(sc.Text())

	// Order IDs and SKUs of this run only: the idempotency table outlives it.
	suffix := randomSuffix(t)
	rename := strings.NewReplacer(`"o-3"`, `"o-3-`+suffix+`"`, `"o-4"`, `"o-4-`+suffix+`"`, `"sku-3"`, `"sku-3-`+suffix+`"`)
	env := append(os.Environ(), "KAFKA_BROKERS="+brokers, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"),
		"AWS_ENDPOINT_URL_DYNAMODB="+dynamoEP,
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true")

	w := startWorker(t, worker, env)
	logs := w.logs

	var dlqOut string
	for _, line := range shLines(t, "### On Kafka", "kafkadev produce ", "kafkadev read ") {
		cmd := exec.CommandContext(ctx, "bash", "-c", rename.Replace(line))
		cmd.Env = env
		got, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s\nworker:\n%s", line, err, got, logs)
		}
		if strings.HasPrefix(line, "kafkadev read ") {
			dlqOut = string(got)
		}
	}
	if n := strings.Count(dlqOut, "\n"); n != 2 || !strings.Contains(dlqOut, "not valid JSON") || !strings.Contains(dlqOut, "not an order") {
		t.Errorf("orders-dlq holds %d records, want the two malformed ones with their reasons:\n%s", n, dlqOut)
	}
	sku := "sku-3-" + suffix
	testenv.Eventually(t, time.Minute, "the order counted", func() bool { return total(t, ctx, db, sku) > 0 })
	if got := total(t, ctx, db, sku); got != 5 {
		t.Errorf("%s total %d after one order of 5 sent twice, want 5", sku, got)
	}
	if n := logs.count("order counted"); n != 1 {
		t.Errorf("the handler counted %d times, want 1:\n%s", n, logs)
	}

	w.stop(t)
}

// shLines returns the lines of the first ```sh block after heading in
// README.md that start with one of prefixes, comments cut.
func shLines(t *testing.T, heading string, prefixes ...string) []string {
	t.Helper()
	block := fencedBlock(t, heading, "sh")
	var out []string
	for line := range strings.Lines(block) {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, "   # "); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("README.md's %q sh block has no line starting with %q", heading, prefixes)
	}
	return out
}
