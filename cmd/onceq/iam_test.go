package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/awstest"
)

// readmeCLIActions is docs/iam.md's table of what each CLI command calls:
// actions by command ("create-table", ...).
func readmeCLIActions(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/iam.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	row := regexp.MustCompile("(?m)^\\| `onceq ([a-z-]+)[^`]*` \\| (.*) \\|$")
	action := regexp.MustCompile("`((?:dynamodb|sqs):[A-Za-z]+)`")
	for _, m := range row.FindAllStringSubmatch(string(b), -1) {
		for _, a := range action.FindAllStringSubmatch(m[2], -1) {
			out[m[1]] = append(out[m[1]], a[1])
		}
		slices.Sort(out[m[1]])
	}
	if len(out) == 0 {
		t.Fatal("no table of the CLI's actions in docs/iam.md")
	}
	return out
}

// TestIAMActionsOfCommands: each CLI command that calls AWS makes exactly
// the calls docs/iam.md's table lists for it, recorded through an SDK
// middleware on every path it takes here.
func TestIAMActionsOfCommands(t *testing.T) {
	q := localSQS(t)
	table := tableName(t)
	_, dlqARN := createQueue(t, q, table+"-dlq", nil)
	queue, _ := createQueue(t, q, table+"-q", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":"9"}`, dlqARN)})
	rec := awstest.NewIAMRecorder()
	ctx := context.WithValue(context.Background(), apiOptionsKey{}, []func(*middleware.Stack) error{rec.APIOption})
	run := func(args ...string) []string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := run(ctx, args, &out, &errOut); code > 1 {
			t.Fatalf("onceq %v: exit %d: %s", args, code, errOut.String())
		}
		var all []string
		for _, as := range rec.Actions() {
			all = append(all, as...)
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	got := map[string][]string{
		"create-table": run("create-table", "-table", table),
		"check":        run("check", "-table", table, "-sqs-queue-url", queue),
	}
	inspect := run("inspect", "-table", table, "some-key")
	inspect = append(inspect, run("inspect", "-table", table, "-key-hash", dedup.KeyHash("onceq#some-key"))...)
	run("create-table", "-table", table+"_t", "-tenant-layout")
	inspect = append(inspect, run("inspect", "-table", table+"_t", "-tenant", "acme")...)
	slices.Sort(inspect)
	got["inspect"] = slices.Compact(inspect)
	want := readmeCLIActions(t)
	for cmd, as := range got {
		if !slices.Equal(as, want[cmd]) {
			t.Errorf("onceq %s calls %s; docs/iam.md lists %s", cmd, strings.Join(as, " "), strings.Join(want[cmd], " "))
		}
	}
}
