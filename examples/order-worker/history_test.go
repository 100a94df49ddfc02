package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/onceq/onceq/examples/storehistory"
)

// -history records every store call, returned, and an ack for every
// processed, duplicate or rejected message.
func TestHistoryFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "worker.history")
	var out, errOut bytes.Buffer
	if code := run([]string{"-demo", "300", "-progress", "0", "-metrics-addr", "", "-history", path}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var s Summary
	if err := json.Unmarshal(out.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[int64]bool{}
	calls, acks := 0, int64(0)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e storehistory.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		switch e.Kind {
		case storehistory.KindCall:
			calls++
			open[e.ID] = true
		case storehistory.KindReturn:
			if !open[e.ID] || e.Outcome == storehistory.OutcomeUnknown {
				t.Fatalf("return %+v: no open call, or an outcome a memory store cannot give", e)
			}
			delete(open, e.ID)
		case storehistory.KindSettle:
			if e.Action == "ack" {
				acks++
			}
		}
	}
	if want := s.Processed + s.Duplicates + s.Rejected; calls == 0 || len(open) != 0 || acks != want {
		t.Fatalf("%d calls, %d never returned, %d acks (want %d)", calls, len(open), acks, want)
	}
}

func TestHistoryFlagBadPath(t *testing.T) {
	var out, errOut bytes.Buffer
	path := filepath.Join(t.TempDir(), "missing", "worker.history")
	if code := run([]string{"-demo", "10", "-progress", "0", "-metrics-addr", "", "-history", path}, &out, &errOut); code != 1 || !bytes.Contains(errOut.Bytes(), []byte("-history")) {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
