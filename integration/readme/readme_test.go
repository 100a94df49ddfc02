// Package readme tests what README.md shows users, from the README's own
// text, so the two cannot drift apart.
package readme

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The program of the README's "Your first worker", built from the README's
// text and run against DynamoDB Local and the SQS emulator: an order sent
// as is, again, and re-serialized is counted once; a malformed message is
// dead-lettered with its reason; SIGTERM stops the worker cleanly.
func TestFirstWorkerFromREADME(t *testing.T) {
	dynamoEP, sqsEP := testenv.DynamoDBEndpoint(t), testenv.SQSEndpoint(t)
	src := goBlock(t, "## Your first worker")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "first-worker")
	build := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go"))
	build.Dir = "../.." // the module root: the program builds against this tree
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("the README's program does not build: %v\n%s", err, out)
	}

	ctx := testenv.Context(t, 3*time.Minute)
	cfg := awstest.Config(t, "")
	db := ddb.NewFromConfig(cfg, func(o *ddb.Options) { o.BaseEndpoint = aws.String(dynamoEP) })
	q := awssqs.NewFromConfig(cfg, func(o *awssqs.Options) { o.BaseEndpoint = aws.String(sqsEP) })

	// The program names its tables; the test's own SKU and queues keep it
	// apart from other runs against the same servers.
	suffix := randomSuffix(t)
	if err := dynamostore.CreateTable(ctx, db, "onceq_idempotency"); err != nil {
		t.Fatal(err)
	}
	createTotals(t, ctx, db)
	dlq := createQueue(t, ctx, q, "orders-dlq-"+suffix, nil)
	dlqARN := queueAttr(t, ctx, q, dlq, "QueueArn")
	queue := createQueue(t, ctx, q, "orders-"+suffix, map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + dlqARN + `","maxReceiveCount":"10"}`})

	worker := startWorker(t, bin, append(os.Environ(), "QUEUE_URL="+queue,
		"AWS_ENDPOINT_URL_DYNAMODB="+dynamoEP, "AWS_ENDPOINT_URL_SQS="+sqsEP,
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test",
		"AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null", "AWS_EC2_METADATA_DISABLED=true"))
	logs := worker.logs

	// The idempotency table outlives the test: order IDs of this run only.
	sku, id, bad := "sku-"+suffix, "o-1-"+suffix, `{"order_id":"o-2-`+suffix+`"}`
	for _, body := range []string{
		`{"order_id":"` + id + `","sku":"` + sku + `","qty":2}`,
		`{"order_id":"` + id + `","sku":"` + sku + `","qty":2}`,
		`{ "qty": 2, "sku": "` + sku + `", "order_id": "` + id + `" }`,
		`hello`, // not JSON: no key can be read
		bad,     // keyed, but the handler finds no order in it
	} {
		if _, err := q.SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}

	var deadLetters []sqstypes.Message
	testenv.Eventually(t, time.Minute, "the orders counted and the malformed one dead-lettered", func() bool {
		out, err := q.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(dlq),
			MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 60})
		if err == nil {
			deadLetters = append(deadLetters, out.Messages...)
		}
		return total(t, ctx, db, sku) > 0 && len(deadLetters) >= 2 &&
			queueAttr(t, ctx, q, queue, "ApproximateNumberOfMessages") == "0" &&
			queueAttr(t, ctx, q, queue, "ApproximateNumberOfMessagesNotVisible") == "0"
	})

	if got := total(t, ctx, db, sku); got != 2 {
		t.Errorf("%s total %d after one order of 2 sent three ways, want 2", sku, got)
	}
	if n := logs.count("order counted"); n != 1 {
		t.Errorf("the handler counted %d times, want 1:\n%s", n, logs)
	}
	reasons := map[string]string{}
	for _, m := range deadLetters {
		reasons[aws.ToString(m.Body)] = aws.ToString(m.MessageAttributes["onceq-dead-letter-reason"].StringValue)
	}
	if len(deadLetters) != 2 || !strings.Contains(reasons[`hello`], "not valid JSON") ||
		!strings.Contains(reasons[bad], "not an order") {
		t.Errorf("dead letters %d with reasons %q, want the two malformed messages, each with its reason", len(deadLetters), reasons)
	}

	worker.stop(t)
}

// process is a worker the test started, with its log lines.
type process struct {
	cmd    *exec.Cmd
	logs   *lines
	exited chan error
	waited bool
}

// startWorker starts bin with env, reading its stderr into logs; a worker
// the test did not stop is killed when the test ends.
func startWorker(t *testing.T, bin string, env []string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin), logs: &lines{}, exited: make(chan error, 1)}
	p.cmd.Env = env
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logsDone := make(chan struct{})
	go func() { defer close(logsDone); p.logs.read(stderr) }()
	go func() {
		<-logsDone // Wait closes the pipe: read it all first
		p.exited <- p.cmd.Wait()
	}()
	t.Cleanup(func() {
		if !p.waited {
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// stop sends SIGTERM and wants a clean exit within 30 s.
func (p *process) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.waited = true
		if err != nil {
			t.Errorf("the worker exited with %v after SIGTERM, want 0:\n%s", err, p.logs)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not stop within 30 s of SIGTERM:\n%s", p.logs)
	}
}

// goBlock returns the first ```go block after heading in README.md.
func goBlock(t *testing.T, heading string) string {
	t.Helper()
	return fencedBlock(t, heading, "go")
}

// fencedBlock returns the first ```lang block after heading in README.md.
func fencedBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	text = text[i:]
	open := "\n```" + lang + "\n"
	start := strings.Index(text, open)
	if start < 0 {
		t.Fatalf("README.md's %q section has no %s block", heading, lang)
	}
	text = text[start+len(open):]
	end := strings.Index(text, "\n```\n")
	if end < 0 {
		t.Fatalf("README.md's %q %s block is not closed", heading, lang)
	}
	return text[:end+1]
}

func createTotals(t *testing.T, ctx context.Context, db *ddb.Client) {
	t.Helper()
	_, err := db.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String("sku_totals"),
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("sku"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("sku"), KeyType: ddbtypes.KeyTypeHash}},
		BillingMode:          ddbtypes.BillingModePayPerRequest})
	var inUse *ddbtypes.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		t.Fatal(err)
	}
}

func total(t *testing.T, ctx context.Context, db *ddb.Client, sku string) int {
	t.Helper()
	out, err := db.GetItem(ctx, &ddb.GetItemInput{TableName: aws.String("sku_totals"), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"sku": &ddbtypes.AttributeValueMemberS{Value: sku}}})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.Item["ordered"].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		return 0
	}
	v, err := strconv.Atoi(n.Value)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func createQueue(t *testing.T, ctx context.Context, q *awssqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := q.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() {
		_, _ = q.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
	})
	return url
}

func queueAttr(t *testing.T, ctx context.Context, q *awssqs.Client, url, name string) string {
	t.Helper()
	out, err := q.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeName(name)}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes[name]
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// lines keeps a process's log lines.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) read(r interface{ Read([]byte) (int, error) }) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		l.mu.Lock()
		l.all = append(l.all, s.Text())
		l.mu.Unlock()
	}
}

func (l *lines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.all {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n")
}
