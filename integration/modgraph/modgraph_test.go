package modgraph

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// forbidden are module path fragments a library user must never inherit.
var forbidden = []string{
	"prometheus", "google.golang.org/grpc", "go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters", "kfake", "compose-spec", "aws-lambda-go",
	"segmentio/kafka-go", "twmb/franz-go", "jackc/pgx", "redis/go-redis",
}

// userModule is a user's module in a directory of its own, requiring the
// onceq modules named (paths below the repository's root, "" for the
// library module), with main.go importing imports. Every module of the
// repository's go.work is replaced by its directory here, so a module's
// requirements on the others resolve to this checkout as well.
type userModule struct {
	t   *testing.T
	dir string
}

func newUserModule(t *testing.T, modules []string, imports ...string) *userModule {
	t.Helper()
	root := repoRoot(t)
	u := &userModule{t: t, dir: t.TempDir()}
	gomod := "module example.com/user\n\ngo 1.26.0\n"
	for _, m := range modules {
		gomod += "\nrequire " + strings.TrimSuffix("github.com/onceq/onceq/"+m, "/") + " v0.0.0-00010101000000-000000000000\n"
	}
	for path, dir := range workspaceModules(t, root) {
		gomod += "replace " + path + " => " + dir + "\n"
	}
	u.write("go.mod", gomod)
	main := "package main\n\nimport (\n"
	for _, imp := range imports {
		main += "\t_ \"" + imp + "\"\n"
	}
	u.write("main.go", main+")\n\nfunc main() {}\n")
	u.run("mod", "tidy")
	return u
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// workspaceModules maps the path of each module in root's go.work to its
// directory.
func workspaceModules(t *testing.T, root string) map[string]string {
	t.Helper()
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct{ Use []struct{ DiskPath string } }
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	mods := map[string]string{}
	for _, use := range work.Use {
		dir := filepath.Join(root, use.DiskPath)
		gomod, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		path := modfile.ModulePath(gomod)
		if path == "" {
			t.Fatalf("%s/go.mod names no module", dir)
		}
		mods[path] = dir
	}
	return mods
}

func (u *userModule) write(name, text string) {
	u.t.Helper()
	if err := os.WriteFile(filepath.Join(u.dir, name), []byte(text), 0o644); err != nil {
		u.t.Fatal(err)
	}
}

func (u *userModule) run(args ...string) string {
	u.t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = u.dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		u.t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// modules is `go list -m all`: every module in the user's graph.
func (u *userModule) modules() []string {
	return strings.Fields(u.run("list", "-m", "-f", "{{.Path}}", "all"))
}

// linked is `go list -deps`: every package the user's program links.
func (u *userModule) linked() []string {
	return strings.Fields(u.run("list", "-deps", "-f", "{{.ImportPath}}", "."))
}

func TestUserModuleGraph(t *testing.T) {
	u := newUserModule(t, []string{"", "dedup/dynamostore", "sources/sqssource"},
		"github.com/onceq/onceq/consumer", "github.com/onceq/onceq/dedup/dynamostore", "github.com/onceq/onceq/sources/sqssource")
	mods := u.modules()
	for _, m := range mods {
		for _, f := range forbidden {
			if strings.Contains(m, f) {
				t.Errorf("a user module importing consumer, dynamostore and sqssource lists %s", m)
			}
		}
	}
	t.Logf("%d modules in the user's graph", len(mods))
}

// An SQS function requires aws-lambda-go and nothing of Kafka: the Kafka
// handler is a module of its own, so kafka-go is neither linked nor even
// in the graph.
func TestSQSLambdaWithoutKafka(t *testing.T) {
	u := newUserModule(t, []string{"", "dedup/dynamostore", "lambda"},
		"github.com/aws/aws-lambda-go/lambda", "github.com/onceq/onceq/dedup/dynamostore", "github.com/onceq/onceq/lambda/sqslambda")
	mods := u.modules()
	if !slices.Contains(mods, "github.com/aws/aws-lambda-go") {
		t.Fatalf("the graph lacks aws-lambda-go, which the function imports: %v", mods)
	}
	for _, m := range mods {
		for _, f := range forbidden {
			if f != "aws-lambda-go" && strings.Contains(m, f) {
				t.Errorf("a module importing sqslambda lists %s", m)
			}
		}
	}
	for _, p := range u.linked() {
		if strings.Contains(p, "kafka") || strings.Contains(p, "franz-go") {
			t.Errorf("an SQS function links %s", p)
		}
	}
	t.Logf("%d modules in an SQS function's graph", len(mods))
}

// A Kafka function links kafka-go, which its dead-letter Writer is, and no
// SQS client.
func TestKafkaLambdaWithoutSQS(t *testing.T) {
	u := newUserModule(t, []string{"", "dedup/dynamostore", "lambda/kafkalambda", "sources/kafkasource"},
		"github.com/aws/aws-lambda-go/lambda", "github.com/onceq/onceq/dedup/dynamostore", "github.com/onceq/onceq/lambda/kafkalambda")
	linked := u.linked()
	if !slices.Contains(linked, "github.com/segmentio/kafka-go") {
		t.Fatalf("a Kafka function does not link kafka-go: has the check lost its subject? %v", linked)
	}
	for _, p := range linked {
		if strings.Contains(p, "service/sqs") || strings.Contains(p, "lambda/sqslambda") {
			t.Errorf("a Kafka function links %s", p)
		}
	}
}
