package modgraph

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// forbidden are module path fragments a library user must never inherit.
var forbidden = []string{
	"prometheus", "google.golang.org/grpc", "go.opentelemetry.io/otel/sdk",
	"go.opentelemetry.io/otel/exporters", "kfake", "compose-spec", "aws-lambda-go",
	"segmentio/kafka-go", "twmb/franz-go", "jackc/pgx", "redis/go-redis",
}

func TestUserModuleGraph(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/user\n\ngo 1.26.0\n\n"+
		"require github.com/onceq/onceq v0.0.0-00010101000000-000000000000\n\n"+
		"replace github.com/onceq/onceq => "+root+"\n")
	write("main.go", `package main

import (
	_ "github.com/onceq/onceq/consumer"
	_ "github.com/onceq/onceq/dedup/dynamostore"
	_ "github.com/onceq/onceq/sources/sqssource"
)

func main() {}
`)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	run("mod", "tidy")
	mods := strings.Fields(run("list", "-m", "-f", "{{.Path}}", "all"))
	for _, m := range mods {
		for _, f := range forbidden {
			if strings.Contains(m, f) {
				t.Errorf("a user module importing consumer, dynamostore and sqssource lists %s", m)
			}
		}
	}
	t.Logf("%d modules in the user's graph", len(mods))
}
