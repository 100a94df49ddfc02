package modgraph

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// maxUpward is the most upward imports a production package may make
// (see TestUpwardImports). Lower it when one goes; never raise it.
const maxUpward = 0

const library = "github.com/onceq/onceq/"

// room is the top-level directory a package of the repository sits in.
func room(pkg string) string {
	r, _, _ := strings.Cut(strings.TrimPrefix(pkg, library), "/")
	return r
}

// testSupport reports whether pkg is test support by its name: one of its
// path elements begins or ends with "test" (storetest, testenv,
// internal/testsupport/...).
func testSupport(pkg string) bool {
	for _, e := range strings.Split(strings.TrimPrefix(pkg, library), "/") {
		if strings.HasPrefix(e, "test") || strings.HasSuffix(e, "test") {
			return true
		}
	}
	return false
}

// importGraph maps each package of every module in go.work to the
// repository's packages its non-test files import.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, library+"...")
	cmd.Dir = repoRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		g[f[0]] = nil
		for _, imp := range f[1:] {
			if strings.HasPrefix(imp, library) {
				g[f[0]] = append(g[f[0]], imp)
			}
		}
	}
	return g
}

// upward lists the imports that run upward: a package imports one in
// another room that depends, directly or through others, on a package of
// the importer's room. The imported package stands on the importer's room,
// so the arrow climbs; within a room any import is level.
func upward(g map[string][]string) [][2]string {
	reaches := func(from, r string) bool {
		seen := map[string]bool{from: true}
		for stack := []string{from}; len(stack) > 0; {
			p := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for _, q := range g[p] {
				if room(q) == r {
					return true
				}
				if !seen[q] {
					seen[q] = true
					stack = append(stack, q)
				}
			}
		}
		return false
	}
	var up [][2]string
	for _, p := range slices.Sorted(maps.Keys(g)) {
		for _, q := range g[p] {
			if room(p) != room(q) && reaches(q, room(p)) {
				up = append(up, [2]string{p, q})
			}
		}
	}
	return up
}

// Each top-level directory is a room, and a production package imports
// nothing that stands on its own room: the store implementations do not
// reach up into the runners, the shared helpers of internal/ into the
// rooms that use them. Test support (a suite or helper named as such) may
// sit above what it tests, so its arrows are listed but not counted.
//
//	cd integration && go test -run TestUpwardImports -v ./modgraph
//
// prints every upward arrow and the count.
func TestUpwardImports(t *testing.T) {
	g := importGraph(t)
	if len(g) < 50 {
		t.Fatalf("go list found %d packages: has the check lost its subject?", len(g))
	}
	prod, support := 0, 0
	for _, a := range upward(g) {
		kind := "production"
		if testSupport(a[0]) {
			kind = "test support"
			support++
		} else {
			prod++
		}
		t.Logf("upward (%s): %s -> %s", kind, strings.TrimPrefix(a[0], library), strings.TrimPrefix(a[1], library))
	}
	t.Logf("%d upward imports from production packages, %d from test support", prod, support)
	if prod > maxUpward {
		t.Errorf("%d upward imports from production packages, at most %d allowed: move the package to the room it serves", prod, maxUpward)
	}
}

// The rule itself: an arrow into a room that stands on the importer's is
// upward, one into a room below is not, and test support is told by name.
func TestUpwardRule(t *testing.T) {
	g := map[string][]string{
		library + "dedup/memstore": {library + "batch", library + "retry"},
		library + "batch":          {library + "dedup", library + "retry"},
		library + "dedup":          {library + "retry"},
		library + "retry":          nil,
	}
	up := upward(g)
	if len(up) != 1 || up[0] != [2]string{library + "dedup/memstore", library + "batch"} {
		t.Errorf("upward = %v, want only dedup/memstore -> batch", up)
	}
	for pkg, want := range map[string]bool{
		"dedup/storetest": true, "internal/testsupport/faultproxy": true, "internal/testsupport/testenv": true,
		"dedup/memstore": false, "sources/internal/kafkacore": false, "idempotency/httpidem": false,
	} {
		if got := testSupport(library + pkg); got != want {
			t.Errorf("testSupport(%s) = %v, want %v", pkg, got, want)
		}
	}
}

// A source hands messages to whatever runs them and knows none of the
// runners: a package under sources/ that imports the consumer is a
// runner, and its home is beside the others (batch, outbox, idempotency,
// franztxn).
func TestSourcesImportNoRunner(t *testing.T) {
	g := importGraph(t)
	n := 0
	for p, imps := range g {
		if room(p) != "sources" || testSupport(p) {
			continue
		}
		n++
		for _, q := range imps {
			if q == library+"consumer" {
				t.Errorf("%s imports the consumer: a runner belongs beside the others, not under sources/", p)
			}
		}
	}
	if n < 5 {
		t.Fatalf("found %d packages under sources/: has the check lost its subject?", n)
	}
}
