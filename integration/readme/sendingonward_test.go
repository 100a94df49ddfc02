package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// The walkthrough of docs/sending-onward.md: its program, built against
// this tree, prints what the page says it prints: each reserved order
// shipped once though every event was sent twice.
func TestSendingOnwardWalkthrough(t *testing.T) {
	program, after := docSection(t, "sending-onward.md", "## Walkthrough: two stages", "go")
	want, _ := docSection(t, "sending-onward.md", "It prints:", "text")
	if len(after) == 0 {
		t.Fatal("the walkthrough ends with its program")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "twostage")
	build := exec.Command("go", "build", "-o", bin, filepath.Join(dir, "main.go"))
	build.Dir = "../.." // the repository root: the program builds against this tree
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stderr strings.Builder
	run := exec.CommandContext(testenv.Context(t, time.Minute), bin)
	run.Stderr = &stderr // its log lines
	out, err := run.Output()
	if err != nil {
		t.Fatalf("twostage: %v\n%s%s", err, out, stderr.String())
	}
	if string(out) != want {
		t.Fatalf("the walkthrough printed\n%s\nthe page says\n%s", out, want)
	}
}
