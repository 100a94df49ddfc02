package modgraph

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// awsModules are the module path fragments of the AWS SDK: only the
// DynamoDB store, the SQS source and the Lambda handlers may bring them.
var awsModules = []string{"github.com/aws/aws-sdk-go-v2", "github.com/aws/smithy-go"}

func isAWS(module string) bool {
	for _, f := range awsModules {
		if module == f || strings.HasPrefix(module, f+"/") {
			return true
		}
	}
	return false
}

// goIn runs the go command in dir, outside the workspace unless
// workspace, and returns its standard output.
func goIn(t *testing.T, dir string, workspace bool, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if !workspace {
		cmd.Env = append(cmd.Env, "GOWORK=off")
	}
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr)
	}
	return string(out)
}

// The library's module requires no AWS module, and none of its packages
// or tests imports one. The second check is the one that catches an AWS
// import before go mod tidy has written it into go.mod: in the workspace,
// the DynamoDB store's module provides the SDK to every module.
func TestLibraryModuleWithoutAWS(t *testing.T) {
	root := repoRoot(t)
	mods := strings.Fields(goIn(t, root, false, "list", "-m", "-f", "{{.Path}}", "all"))
	if len(mods) == 0 || mods[0] != "github.com/onceq/onceq" {
		t.Fatalf("go list -m all in the repository's root lists %v, want github.com/onceq/onceq first", mods)
	}
	for _, m := range mods {
		if isAWS(m) {
			t.Errorf("go list -m all in the library's module lists %s", m)
		}
	}
	// ./... in the root stops at the nested modules: the library's own packages.
	deps := goIn(t, root, true, "list", "-deps", "-test", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", "./...")
	for line := range strings.Lines(deps) {
		pkg, mod, _ := strings.Cut(strings.TrimSpace(line), " ")
		if isAWS(mod) {
			t.Errorf("the library's module imports %s (of %s)", pkg, mod)
		}
	}
}

// A user of PostgreSQL and Kafka on franz-go inherits no AWS module and
// neither kafka-go nor the kafka-go source (the graph that go list -m all
// shows is what its go.sum and module cache hold, whether or not its
// program links them), and its program links neither the SDK nor kafka-go.
func TestPostgresFranzUserWithoutAWS(t *testing.T) {
	u := newUserModule(t, []string{"", "dedup/pgstore", "sources/franzsource"},
		"github.com/onceq/onceq/consumer", "github.com/onceq/onceq/dedup/pgstore", "github.com/onceq/onceq/sources/franzsource")
	u.run("build", "./...")
	mods := u.modules()
	for _, want := range []string{"github.com/onceq/onceq/dedup/pgstore", "github.com/onceq/onceq/sources/franzsource", "github.com/jackc/pgx/v5", "github.com/twmb/franz-go"} {
		if !slices.Contains(mods, want) {
			t.Fatalf("the graph lacks %s, which the user imports: has the check lost its subject? %v", want, mods)
		}
	}
	for _, m := range mods {
		if isAWS(m) || m == "github.com/segmentio/kafka-go" || m == "github.com/onceq/onceq/sources/kafkasource" {
			t.Errorf("a user module importing consumer, pgstore and franzsource lists %s", m)
		}
	}
	for _, p := range u.linked() {
		if strings.HasPrefix(p, "github.com/segmentio/kafka-go") || strings.HasPrefix(p, "github.com/aws/") {
			t.Errorf("a program importing consumer, pgstore and franzsource links %s", p)
		}
	}
	t.Logf("%d modules in the user's graph", len(mods))
}
