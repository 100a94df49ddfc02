package names

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// figure is a benchmark's measurement: a time or allocations per op, a
// rate, a p-value.
var figure = regexp.MustCompile(`[0-9] ?(ns/op|µs/op|ns CPU|µs CPU|ns per|µs per|allocs?\b|allocations\b|B/op|msgs/s)|p=0\.[0-9]`)

// A comment beside a construction says why it exists and names the
// benchmark that keeps it; the figures live in BENCHMARKS.md alone, so
// that no comment quotes one gone stale.
func TestNoFiguresInComments(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		fset := token.NewFileSet()
		full, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		for _, g := range full.Comments {
			for _, c := range g.List {
				if m := figure.FindString(c.Text); m != "" {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s:%d: a comment quotes a figure (%q): say why, name the benchmark, and keep the figure in BENCHMARKS.md", rel, fset.Position(c.Pos()).Line, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files: has the check lost its subject?", files)
	}
}
