package readme

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/lambdatest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The function's environment variable for each table the walkthrough
// names (their defaults in examples/lambda-order): the test makes tables of
// its own, so runs against one DynamoDB Local never share records.
var lambdaTableEnv = map[string]string{
	"onceq_idempotency": "ONCEQ_TABLE",
	"onceq_inventory":   "INVENTORY_TABLE",
	"onceq_orders":      "ORDERS_TABLE",
}

// docs/lambda.md's "Under the emulator", from the page's own text: the
// function built as the page builds it, run under aws-lambda-rie (on free
// ports) against DynamoDB Local, with the page's tables and item; the
// page's event is posted as often as the page says, each answer is the one
// the page states, and the reserved count is the page's.
func TestLambdaUnderEmulatorFromDocs(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	block, after := docSection(t, "lambda.md", "**Under the emulator.**", "sh")
	one := func(re, what string) []string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(block + "\n" + after)
		if m == nil {
			t.Fatalf("docs/lambda.md's walkthrough has no %s (%s)", what, re)
		}
		return m
	}
	pkg := one(`go build -o \S+ (\./examples/\S+)`, "build line")[1]
	idemTable := one(`create-table -table (\S+)`, "idempotency table")[1]
	timeout := one(`AWS_LAMBDA_FUNCTION_TIMEOUT=(\d+)`, "function timeout")[1]
	path := one(`curl .*127\.0\.0\.1:\d+(/\S+) `, "invocation URL")[1]
	event := one(`(?s)-d '(.*?)'\n`, "event")[1]
	answer := one("Both answers are `([^`]+)`", "stated answer")[1]
	reserved := one(`(\S+) shows\s+(\d+) reserved`, "stated reservation")
	invocations := 1
	if strings.Contains(after, "Run the `curl` line twice") {
		invocations = 2
	}
	if !json.Valid([]byte(event)) {
		t.Fatalf("the page's event is not JSON:\n%s", event)
	}

	dir := t.TempDir()
	bin := filepath.Join(dir, "bootstrap")
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}

	ctx := testenv.Context(t, 2*time.Minute)
	db := ddb.NewFromConfig(awstest.Config(t, ep))
	suffix := randomSuffix(t)
	env := map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": ep,
		"AWS_REGION": testenv.Region, "AWS_ACCESS_KEY_ID": testenv.AccessKeyID, "AWS_SECRET_ACCESS_KEY": testenv.SecretAccessKey,
		"AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_EC2_METADATA_DISABLED": "true"}
	tables := 0
	tableEnv := func(name string) {
		t.Helper()
		v, ok := lambdaTableEnv[name]
		if !ok {
			t.Fatalf("docs/lambda.md names table %q, which examples/lambda-order does not read", name)
		}
		env[v] = name + "_" + suffix
		tables++
	}
	tableEnv(idemTable)
	if err := dynamostore.CreateTable(ctx, db, idemTable+"_"+suffix); err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`create-table --table-name (\S+) .*\\\n\s+--attribute-definitions AttributeName=(\w+),AttributeType=S`).FindAllStringSubmatch(block, -1) {
		tableEnv(m[1])
		if _, err := db.CreateTable(ctx, &ddb.CreateTableInput{TableName: aws.String(m[1] + "_" + suffix), BillingMode: ddbtypes.BillingModePayPerRequest,
			AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String(m[2]), AttributeType: ddbtypes.ScalarAttributeTypeS}},
			KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String(m[2]), KeyType: ddbtypes.KeyTypeHash}}}); err != nil {
			t.Fatal(err)
		}
	}
	if tables != 3 {
		t.Fatalf("the walkthrough makes %d tables, want the idempotency, inventory and orders tables", tables)
	}
	var inventory string
	for _, m := range regexp.MustCompile(`put-item --table-name (\S+) \\\n\s+--item '([^']*)'`).FindAllStringSubmatch(block, -1) {
		inventory = m[1] + "_" + suffix
		if _, err := db.PutItem(ctx, &ddb.PutItemInput{TableName: aws.String(inventory), Item: dynamoJSON(t, m[2])}); err != nil {
			t.Fatal(err)
		}
	}
	if inventory == "" {
		t.Fatal("the walkthrough puts no inventory item")
	}

	seconds, err := strconv.Atoi(timeout)
	if err != nil {
		t.Fatal(err)
	}
	fn := lambdatest.Start(t, bin, seconds, env)

	for i := range invocations {
		resp, err := http.Post("http://"+fn.Addr+path, "application/json", strings.NewReader(event))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if got := string(bytes.TrimSpace(body)); got != answer {
			t.Errorf("invocation %d answered %s; the page says %s", i+1, got, answer)
		}
	}
	out, err := db.GetItem(ctx, &ddb.GetItemInput{TableName: aws.String(inventory), ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"sku": &ddbtypes.AttributeValueMemberS{Value: reserved[1]}}})
	if err != nil {
		t.Fatal(err)
	}
	got := "none"
	if n, ok := out.Item["reserved"].(*ddbtypes.AttributeValueMemberN); ok {
		got = n.Value
	}
	if got != reserved[2] {
		t.Errorf("%s reserved %s; the page says %s", reserved[1], got, reserved[2])
	}
}

// docSection returns the first ```lang block after marker in docs/page,
// and the text after that block.
func docSection(t *testing.T, page, marker, lang string) (block, after string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../../docs", page))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("docs/%s has no %q", page, marker)
	}
	text = text[i:]
	open := "\n```" + lang + "\n"
	start := strings.Index(text, open)
	if start < 0 {
		t.Fatalf("docs/%s's %q has no %s block", page, marker, lang)
	}
	text = text[start+len(open):]
	end := strings.Index(text, "\n```\n")
	if end < 0 {
		t.Fatalf("docs/%s's %q %s block is not closed", page, marker, lang)
	}
	return text[:end+1], text[end+len("\n```\n"):]
}

// dynamoJSON reads an item in the AWS CLI's JSON form (S and N values).
func dynamoJSON(t *testing.T, s string) map[string]ddbtypes.AttributeValue {
	t.Helper()
	var raw map[string]map[string]string
	if err := json.Unmarshal([]byte(s), &raw); err != nil {
		t.Fatalf("the page's item %s: %v", s, err)
	}
	item := map[string]ddbtypes.AttributeValue{}
	for k, v := range raw {
		switch {
		case v["S"] != "":
			item[k] = &ddbtypes.AttributeValueMemberS{Value: v["S"]}
		case v["N"] != "":
			item[k] = &ddbtypes.AttributeValueMemberN{Value: v["N"]}
		default:
			t.Fatalf("the page's item: attribute %s is neither S nor N", k)
		}
	}
	return item
}
