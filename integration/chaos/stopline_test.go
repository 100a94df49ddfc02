package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A worker that fails its SIGTERM stop is named, with its error (the last
// line it logged), in the driver's final line; and the line counts the
// dead-letter copies apart from the malformed messages they carry.
func TestFinalLineNamesFailedStop(t *testing.T) {
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "worker.sh")
	script := "#!/bin/sh\n" +
		"trap 'echo \"order-worker: consumer: closing source: the group said no\" >&2; exit 1' TERM\n" +
		"echo ready >&2\n" +
		"while :; do sleep 0.05; done\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &pool{bin: bin, tmp: tmp, logw: io.Discard}
	if err := p.start(1); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.stopAll(5 * time.Second) })
	log := filepath.Join(tmp, "worker-1-1.log")
	for deadline := time.Now().Add(20 * time.Second); ; {
		if b, _ := os.ReadFile(log); strings.Contains(string(b), "ready") {
			break // the trap is installed
		}
		if time.Now().After(deadline) {
			t.Fatal("the worker never started")
		}
		time.Sleep(10 * time.Millisecond) // polling a condition under a deadline
	}
	if err := p.leave(1, 10*time.Second); err == nil {
		t.Fatal("leave: nil, want the failed stop")
	}
	res := &result{source: "franz", malformed: 20, dlq: 20, dlqCopies: 23, workersExitedNonZero: 1, stopError: p.firstStopError()}
	line := res.line()
	for _, want := range []string{"dlq=20 dlq_copies=23", `sigterm_failed=1`, "worker 1: exit status 1: order-worker: consumer: closing source: the group said no"} {
		if !strings.Contains(line, want) {
			t.Errorf("final line %q lacks %q", line, want)
		}
	}
}
