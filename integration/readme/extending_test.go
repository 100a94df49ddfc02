package readme

import (
	"go/format"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

const extending = "../../docs/extending.md"

// TestExtendingFromDocs builds the store, the source and the sender of
// docs/extending.md from the page's text (each ```go block, as gofmt
// writes it, is the file its first line names) and runs the page's own
// tests of them under the race detector: the store passes storetest and
// idemtest, the source sourcetest, the sender outboxtest. Every case a
// suite skips must be named on the page, which tells the reader why, and
// a case of each suite must have passed, so that a suite skipped whole
// cannot pass for one run.
func TestExtendingFromDocs(t *testing.T) {
	page, err := os.ReadFile(extending)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkgs := map[string][]string{} // the page's files, by directory
	for _, b := range fencedBlocks(t, extending, "go") {
		first, _, _ := strings.Cut(b, "\n")
		name, ok := strings.CutPrefix(first, "// ")
		if !ok || !strings.HasSuffix(name, ".go") || filepath.IsAbs(name) || strings.Contains(name, "..") {
			t.Fatalf("a go block of docs/extending.md starts with %q, want the file it goes in (// pkg/file.go)", first)
		}
		if src, err := format.Source([]byte(b)); err != nil || string(src) != b {
			t.Errorf("docs/extending.md's %s is not as gofmt writes it (%v)", name, err)
		}
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
		pkgs[filepath.Dir(name)] = append(pkgs[filepath.Dir(name)], path)
	}
	want := map[string][]string{ // a case of each suite, which must have passed
		"mapstore":   {"TestConformance/ClaimFresh", "TestConformance/Wrapped/Inspector", "TestConformance/Forget", "TestIdempotency/FiftyConcurrentRetriesRunOnce"},
		"chansource": {"TestConformance/NothingLostOnClose", "TestConformance/WrapperKeepsDeadLetter", "TestSender/PipelineExactlyOnce"},
	}
	if got := slices.Sorted(maps.Keys(pkgs)); !slices.Equal(got, []string{"chansource", "mapstore"}) {
		t.Fatalf("docs/extending.md has files in %v, want chansource and mapstore", got)
	}
	ctx := testenv.Context(t, 3*time.Minute)
	for pkg, files := range pkgs {
		cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-race", "-count=1", "-v"}, files...)...)
		cmd.Dir = "../.." // the repository root: the page's code builds against this tree
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go test of the page's %s: %v\n%s", pkg, err, out)
		}
		for _, name := range want[pkg] {
			if !strings.Contains(string(out), "--- PASS: "+name+" ") {
				t.Errorf("the page's %s: %s did not pass:\n%s", pkg, name, out)
			}
		}
		for _, name := range skipped(string(out)) {
			if !strings.Contains(string(page), "`"+name+"`") {
				t.Errorf("the page's %s skips %s, which docs/extending.md does not name", pkg, name)
			}
		}
	}
}

var skipLine = regexp.MustCompile(`--- SKIP: Test\w+/(\S+)`)

// skipped returns the cases go test -v reports skipped, as the page names
// them: without the wrapper's pass (Wrapped/) and the group's cases under
// its name (Batch/...: Batch).
func skipped(out string) []string {
	var names []string
	for _, m := range skipLine.FindAllStringSubmatch(out, -1) {
		name := strings.TrimPrefix(m[1], "Wrapped/")
		name, _, _ = strings.Cut(name, "/")
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	return names
}
