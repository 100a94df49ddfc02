package main

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunDrainsEveryMessage(t *testing.T) {
	res, err := run(context.Background(), config{messages: 20000, workers: 4, maxInFlight: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.acked != 20000 || res.peakKB <= 0 {
		t.Fatalf("%d acked, peak %d KiB", res.acked, res.peakKB)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	if _, err := run(context.Background(), config{messages: 10, workers: 8, maxInFlight: 4}); err == nil {
		t.Fatal("max-in-flight below workers accepted")
	}
}

func TestVMHWM(t *testing.T) {
	kb, err := vmHWM(strings.NewReader("Name:\tx\nVmPeak:\t  9000 kB\nVmHWM:\t   12345 kB\nVmRSS:\t 100 kB\n"))
	if err != nil || kb != 12345 {
		t.Fatalf("VmHWM %d, %v", kb, err)
	}
	if _, err := vmHWM(strings.NewReader("Name:\tx\n")); err == nil {
		t.Fatal("no VmHWM line, no error")
	}
}
