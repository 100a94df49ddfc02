package main

import (
	"io"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func newReport(out io.Writer, groups ...*group) *report {
	return &report{out: out, began: time.Now(), running: map[string]time.Time{}, output: map[string]*strings.Builder{},
		groups: append(groups, &group{name: "others", pending: map[string]bool{}}), groupOf: map[string]*group{}}
}

// A group is said once its last package is done; a failing package's
// output is printed, and the run is a failure.
func TestGroupsAndFailures(t *testing.T) {
	var out strings.Builder
	r := newReport(&out, &group{name: "stores", match: []string{"/pgstore", "/redisstore"}, pending: map[string]bool{}})
	for _, p := range []string{"m/pgstore", "m/redisstore", "m/consumer"} {
		r.expect(p)
	}
	in := strings.Join([]string{
		`{"Action":"start","Package":"m/pgstore"}`,
		`{"Action":"start","Package":"m/redisstore"}`,
		`{"Action":"output","Package":"m/pgstore","Test":"TestX","Output":"--- FAIL: TestX\n"}`,
		`{"Action":"fail","Package":"m/pgstore","Test":"TestX","Elapsed":1}`,
		`{"Action":"fail","Package":"m/pgstore","Elapsed":2.5}`,
		`{"Action":"pass","Package":"m/redisstore","Elapsed":1}`,
		`{"Action":"pass","Package":"m/consumer","Elapsed":3}`,
	}, "\n")
	if r.read(strings.NewReader(in), time.Hour) {
		t.Error("a run with a failed package reads as passed")
	}
	got := out.String()
	for _, want := range []string{"--- FAIL: TestX\nFAIL m/pgstore (2.5s)", "ok   m/redisstore (1.0s)",
		"== stores: 2 packages, 1 FAILED, done ", "== others: 1 package, ok", "FAILED: m/pgstore"} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "== stores") < strings.Index(got, "ok   m/redisstore") {
		t.Errorf("the group was said before its last package:\n%s", got)
	}
}

// A package that did not build fails the run, with the compiler's words.
func TestBuildFailure(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	in := `{"ImportPath":"m/x [m/x.test]","Action":"build-output","Output":"x.go:1: undefined: y\n"}
{"ImportPath":"m/x [m/x.test]","Action":"build-fail"}
{"Action":"fail","Package":"m/x","Elapsed":0,"FailedBuild":"m/x [m/x.test]"}`
	if r.read(strings.NewReader(in), time.Hour) || !strings.Contains(out.String(), "undefined: y") {
		t.Errorf("a build failure: %s", out.String())
	}
}

// While nothing ends, the report says what is running, at the heartbeat.
func TestHeartbeatNamesWhatRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out strings.Builder
		r := newReport(&out)
		pr, pw := io.Pipe()
		done := make(chan bool)
		go func() { done <- r.read(pr, time.Minute) }()
		if _, err := io.WriteString(pw, `{"Action":"start","Package":"m/slow"}`+"\n"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Second) // the bubble's clock: two heartbeats
		synctest.Wait()
		_, _ = io.WriteString(pw, `{"Action":"pass","Package":"m/slow","Elapsed":150}`+"\n")
		pw.Close()
		<-done
		if n := strings.Count(out.String(), "running: m/slow ("); n != 2 {
			t.Errorf("%d heartbeats named the running package in 150s, want 2:\n%s", n, out.String())
		}
	})
}
