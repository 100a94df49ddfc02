package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/broker"
	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/internal/testsupport/memsourcetest"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/sources/memsource"
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

// noDeadLetters is a source with no dead-letter destination, as an SQS
// source is without a redrive policy or DeadLetterQueue.
type noDeadLetters struct{ *memsource.Source }

func (s noDeadLetters) Capabilities() broker.Capabilities {
	c := s.Source.Capabilities()
	c.DeadLetter = false
	return c
}

// What the page says of a source with no dead-letter destination is what
// consumer.New does: it refuses it with the page's words, and takes it
// with WithoutDeadLetters.
func TestSendingOnwardDeadLetterNeed(t *testing.T) {
	b, err := os.ReadFile("../../docs/sending-onward.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`consumer.New` refuses the\\s+source \\(`([^`]+)`\\) unless it is given\\s+`consumer.WithoutDeadLetters\\(\\)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/sending-onward.md no longer says what consumer.New does with a source that has no dead-letter destination")
	}
	src := noDeadLetters{memsourcetest.NewQueue(t, "orders").Source()}
	store := memstoretest.New(t)
	h := consumer.HandlerFunc(func(context.Context, *consumer.Message) (consumer.Result, error) { return consumer.Result{}, nil })
	if _, err := consumer.New(src, store, h); err == nil || !strings.Contains(err.Error(), string(m[1])) {
		t.Errorf("consumer.New of a source without dead letters: %v, the page says it says %q", err, m[1])
	}
	if _, err := consumer.New(src, store, h, consumer.WithoutDeadLetters()); err != nil {
		t.Errorf("consumer.New with WithoutDeadLetters: %v", err)
	}
}
