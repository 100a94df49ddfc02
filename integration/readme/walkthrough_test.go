package readme

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

const walkthrough = "../../docs/kafka-postgres.md"

// metricsAddr is where the walkthrough's worker serves its metrics and
// health.
const metricsAddr = "127.0.0.1:9464"

// fencedBlocks returns every ```lang block of file, in order.
func fencedBlocks(t *testing.T, file, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	text, open := string(b), "\n```"+lang+"\n"
	for {
		i := strings.Index(text, open)
		if i < 0 {
			return out
		}
		text = text[i+len(open):]
		end := strings.Index(text, "\n```\n")
		if end < 0 {
			t.Fatalf("%s: a %s block is not closed", file, lang)
		}
		out = append(out, text[:end+1])
		text = text[end:]
	}
}

var prints = regexp.MustCompile(`\s+# prints (\S+?):?(\s|$)`)

// shell runs a walkthrough's lines one at a time in dir, as a reader's
// shell would: what a line exports (set -a, export) holds for the next.
type shell struct {
	t     *testing.T
	dir   string
	state string // the shell's exported variables, as export -p prints them
	// jobs are the workers started with &, by bash's job number: the
	// highest running one's plus one, 1 when none runs.
	jobs map[int]*process
	all  []*process
	ran  []string // the page's commands, in the order they ran
}

func (s *shell) run(ctx context.Context, line string) string {
	s.t.Helper()
	out, err := s.try(ctx, line)
	if err != nil {
		s.t.Fatalf("%s: %v\n%s", line, err, out)
	}
	return out
}

// try runs line as run does, and returns its failure rather than
// failing the test.
func (s *shell) try(ctx context.Context, line string) (string, error) {
	script := "set -e\n. " + s.state + "\n" + line + "\nexport -p > " + s.state + "\n"
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir = s.dir
	cmd.Env = []string{"HOME=" + os.Getenv("HOME"), "PATH=" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// env is the environment the shell's lines have built so far.
func (s *shell) env(ctx context.Context) []string {
	s.t.Helper()
	s.run(ctx, "env -0 > "+s.state+".env")
	b, err := os.ReadFile(s.state + ".env")
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// TestKafkaPostgresWalkthrough runs docs/kafka-postgres.md from its text:
// its program saved as main.go in orders/ beside this checkout (../onceq),
// each of its commands as written, in order, in one shell whose exports
// carry over, with PostgreSQL and the Kafka broker started by the page's
// own servers.sh line on a run directory of the test's own. A line ending
// in `&` starts the worker, `kill -9 %N` and `kill %N` stop it (SIGKILL,
// SIGTERM), and a line whose comment says `# prints X` must print X (it is
// run again until it does, within a bound). The worker's metrics and
// health are on a free port in place of the page's 9464. It also holds
// the page to its promise: at most ten commands from `go mod init` to the
// first order counted; and to its end: `onceq inspect` finds the order's
// record.
func TestKafkaPostgresWalkthrough(t *testing.T) {
	program := fencedBlocks(t, walkthrough, "go")
	if len(program) == 1 && !strings.Contains(program[0], `"`+metricsAddr+`"`) {
		t.Fatalf("%s's worker does not listen on %s, where the page reads its metrics", walkthrough, metricsAddr)
	}
	s, firstCheck := runWalkthrough(t, walkthrough)
	if !slices.ContainsFunc(s.ran, func(line string) bool { return strings.Contains(line, "onceq inspect ") }) {
		t.Errorf("%s runs no onceq inspect on the worker's records", walkthrough)
	}
	if firstCheck == 0 || firstCheck > 10 {
		t.Errorf("the first order is checked at command %d after go mod init; the page promises at most ten", firstCheck)
	}
	// The handler itself ran once for the order sent twice.
	if runs := s.logCount("order_id=o-1 "); runs != 1 {
		t.Errorf("the handler recorded order o-1 %d times, want once", runs)
	}
}

// runWalkthrough runs a page from its text, as TestKafkaPostgresWalkthrough
// says, and returns its shell and the command, counted from go mod init,
// of its first `# prints` check.
func runWalkthrough(t *testing.T, page string) (s *shell, firstCheck int) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a module and starts servers")
	}
	testenv.PostgresURL(t) // the servers this page starts must be installable here
	// The worker's metrics and health, where a page has them, on a free
	// port of the test's own, in the program and in the commands alike.
	port := strings.NewReplacer(metricsAddr, freeAddr(t))
	programs := fencedBlocks(t, page, "go")
	if len(programs) != 1 {
		t.Fatalf("%s has %d go blocks, want the worker's one", page, len(programs))
	}
	base, dir := pageDir(t, "orders", port.Replace(programs[0]))
	s = &shell{t: t, dir: dir, state: filepath.Join(base, "shell.env"), jobs: map[int]*process{}}
	// The page's servers on a run directory of the test's own, stopped
	// whatever happens.
	if err := os.WriteFile(s.state, []byte("export ONCEQ_RUN_DIR="+filepath.Join(base, "run")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd := exec.Command("bash", "onceq/integration/servers.sh", "stop")
		cmd.Dir, cmd.Env = base, append(os.Environ(), "ONCEQ_RUN_DIR="+filepath.Join(base, "run"))
		_ = cmd.Run()
	})

	ctx := testenv.Context(t, 12*time.Minute)
	commands := 0
	for _, block := range fencedBlocks(t, page, "sh") {
		for line := range strings.Lines(port.Replace(block)) {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if strings.HasPrefix(line, "go mod init") || commands > 0 {
				commands++
			}
			want := ""
			if m := prints.FindStringSubmatch(line); m != nil {
				want = m[1]
				if firstCheck == 0 {
					firstCheck = commands
				}
			}
			s.step(ctx, dir, line, want, 3*time.Minute)
			s.ran = append(s.ran, line)
		}
	}
	return s, firstCheck
}

// logCount counts the lines containing text that the page's programs
// logged, over every run of them.
func (s *shell) logCount(text string) int {
	n := 0
	for _, p := range s.all {
		n += p.logs.count(text)
	}
	return n
}

// pageDir makes a directory name beside a link to this checkout
// (../onceq), as a page's reader has, with the page's program in it as
// main.go, and returns the directory above both and the program's.
func pageDir(t *testing.T, name, program string) (base, dir string) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	base = t.TempDir()
	dir = filepath.Join(base, name)
	if err := os.Symlink(root, filepath.Join(base, "onceq")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(program), 0o600); err != nil {
		t.Fatal(err)
	}
	return base, dir
}

// step runs one line of a page in dir, as its reader would: a line ending
// in `&` starts the program, `kill -9 %N` and `kill %N` stop it (SIGKILL,
// SIGTERM), a line that must print want is run again until it does
// (within bound), and any other line runs once.
func (s *shell) step(ctx context.Context, dir, line, want string, bound time.Duration) {
	t := s.t
	t.Helper()
	switch {
	case strings.HasSuffix(line, "&"):
		bin := strings.TrimSpace(strings.TrimSuffix(line, "&"))
		p := startWorker(t, filepath.Join(dir, bin), s.env(ctx))
		next := 1
		for n := range s.jobs {
			next = max(next, n+1)
		}
		s.jobs[next], s.all = p, append(s.all, p)
	case strings.HasPrefix(line, "kill "):
		for _, f := range strings.Fields(line)[1:] {
			if f == "-9" {
				continue
			}
			n, p := s.job(f)
			delete(s.jobs, n)
			if strings.Contains(line, "-9") {
				_ = p.cmd.Process.Signal(syscall.SIGKILL)
				<-p.exited
				p.waited = true
			} else {
				p.stop(t)
			}
		}
	case want != "":
		// A query of what a program started by an earlier line makes may
		// run before that program has made it (its table, say): a failure
		// counts as not yet, and the bound still fails the test.
		testenv.Eventually(t, bound, line+" prints "+want, func() bool {
			got, err := s.try(ctx, line)
			return err == nil && strings.TrimSpace(got) == want
		})
	default:
		s.run(ctx, line)
	}
}

// job is the running worker a kill line's %N names.
func (s *shell) job(spec string) (int, *process) {
	s.t.Helper()
	n, err := strconv.Atoi(strings.TrimPrefix(spec, "%"))
	p, ok := s.jobs[n]
	if err != nil || !ok {
		s.t.Fatalf("kill %s: no such job (%d running)", spec, len(s.jobs))
	}
	return n, p
}
