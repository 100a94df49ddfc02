// Command testreport reads `go test -json` on stdin and says, as the run
// goes: each package's result with its time, each group of packages once
// its last package is done (with the time since the run began), and,
// whenever a minute passes with nothing to say, what is still running. A
// failing package's output is printed whole. It exits 1 when a package
// failed or did not build.
//
//	go test -json ./... | testreport -packages list.txt -group stores=/dedup/pgstore ...
//
// -packages is the `go list` of the run, one import path a line, so that a
// group knows when it is done. A -group NAME=SUBSTRING puts each package
// whose path holds SUBSTRING in NAME (the first match wins; repeat
// SUBSTRING with | between alternatives); the others are in "others".
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Elapsed    float64
	Output     string
}

type group struct {
	name    string
	match   []string
	pending map[string]bool
	total   int
	failed  int
}

// groupFlags collects -group NAME=SUBSTRING|SUBSTRING.
type groupFlags []*group

func (g *groupFlags) String() string { return fmt.Sprint(len(*g), " groups") }

func (g *groupFlags) Set(v string) error {
	name, match, ok := strings.Cut(v, "=")
	if !ok || name == "" || match == "" {
		return fmt.Errorf("-group %q: want NAME=SUBSTRING", v)
	}
	*g = append(*g, &group{name: name, match: strings.Split(match, "|"), pending: map[string]bool{}})
	return nil
}

func main() {
	var groups groupFlags
	list := flag.String("packages", "", "file listing the run's packages, one import path a line")
	quiet := flag.Duration("heartbeat", time.Minute, "after this long with nothing said, say what is still running")
	flag.Var(&groups, "group", "NAME=SUBSTRING[|SUBSTRING...]: a group of packages (repeatable)")
	flag.Parse()
	r := &report{out: os.Stdout, began: time.Now(), running: map[string]time.Time{}, output: map[string]*strings.Builder{},
		groups: append(groups, &group{name: "others", pending: map[string]bool{}}), groupOf: map[string]*group{}}
	if *list != "" {
		b, err := os.ReadFile(*list)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		for p := range strings.Lines(string(b)) {
			if p = strings.TrimSpace(p); p != "" {
				r.expect(p)
			}
		}
	}
	if !r.read(os.Stdin, *quiet) {
		os.Exit(1)
	}
}

type report struct {
	out     io.Writer
	began   time.Time
	said    time.Time
	running map[string]time.Time // package: when its test binary started
	output  map[string]*strings.Builder
	groups  []*group
	groupOf map[string]*group
	done    int
	failed  []string
}

func (r *report) expect(pkg string) {
	g := r.groups[len(r.groups)-1]
	for _, c := range r.groups[:len(r.groups)-1] {
		if slices.ContainsFunc(c.match, func(m string) bool { return strings.Contains(pkg, m) }) {
			g = c
			break
		}
	}
	if !g.pending[pkg] {
		g.pending[pkg] = true
		g.total++
	}
	r.groupOf[pkg] = g
}

func (r *report) say(format string, args ...any) {
	fmt.Fprintf(r.out, format+"\n", args...)
	r.said = time.Now()
}

func since(t time.Time) string { return time.Since(t).Round(time.Second).String() }

// read reports the events of in until it ends; false when a package
// failed.
func (r *report) read(in io.Reader, quiet time.Duration) bool {
	lines := make(chan []byte)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			lines <- slices.Clone(sc.Bytes())
		}
	}()
	r.said = time.Now()
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				return r.end()
			}
			r.event(line)
		case <-tick.C:
			if time.Since(r.said) >= quiet {
				r.heartbeat()
			}
		}
	}
}

func (r *report) event(line []byte) {
	var e event
	if err := json.Unmarshal(line, &e); err != nil {
		r.say("%s", line) // not an event: go test's own words (a flag error, say)
		return
	}
	pkg := e.Package
	if pkg == "" {
		pkg = e.ImportPath
	}
	buf := r.output[pkg]
	if buf == nil {
		buf = &strings.Builder{}
		r.output[pkg] = buf
	}
	switch e.Action {
	case "output", "build-output":
		buf.WriteString(e.Output)
	case "start":
		r.running[pkg] = time.Now()
	case "build-fail":
		buf.WriteString("(the package did not build)\n")
	case "pass", "fail", "skip":
		if e.Test != "" {
			return
		}
		r.finished(pkg, e.Action, e.Elapsed, buf.String())
	}
}

func (r *report) finished(pkg, action string, elapsed float64, output string) {
	delete(r.running, pkg)
	delete(r.output, pkg)
	r.done++
	g := r.groupOf[pkg]
	if g == nil {
		r.expect(pkg)
		g = r.groupOf[pkg]
	}
	switch action {
	case "fail":
		r.failed = append(r.failed, pkg)
		g.failed++
		r.say("%s", strings.TrimRight(output, "\n"))
		r.say("FAIL %s (%.1fs)", pkg, elapsed)
	case "skip":
		r.say("--   %s (no tests)", pkg)
	default:
		r.say("ok   %s (%.1fs)", pkg, elapsed)
	}
	delete(g.pending, pkg)
	if len(g.pending) == 0 {
		state := "ok"
		if g.failed > 0 {
			state = fmt.Sprintf("%d FAILED", g.failed)
		}
		r.say("== %s: %s, %s, done %s into the run", g.name, packages(g.total), state, since(r.began))
	}
}

func (r *report) heartbeat() {
	var names []string
	for pkg, t := range r.running {
		names = append(names, fmt.Sprintf("%s (%s)", pkg, since(t)))
	}
	slices.Sort(names)
	if len(names) == 0 {
		r.say(".. %s into the run, %s done; building the next", since(r.began), packages(r.done))
		return
	}
	r.say(".. %s into the run, %s done; running: %s", since(r.began), packages(r.done), strings.Join(names, ", "))
}

func (r *report) end() bool {
	for pkg, out := range r.output {
		// Output of a package that never ended: go test was stopped, or
		// the package did not build.
		if strings.TrimSpace(out.String()) != "" {
			r.say("%s", strings.TrimRight(out.String(), "\n"))
			r.failed = append(r.failed, pkg)
		}
	}
	if len(r.failed) > 0 {
		slices.Sort(r.failed)
		r.say("== %s in %s; FAILED: %s", packages(r.done), since(r.began), strings.Join(slices.Compact(r.failed), ", "))
		return false
	}
	r.say("== %s in %s, all ok", packages(r.done), since(r.began))
	return true
}

func packages(n int) string {
	if n == 1 {
		return "1 package"
	}
	return fmt.Sprintf("%d packages", n)
}
