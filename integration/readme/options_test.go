package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// optionPages says, for each package whose options users set, the
// reference page that must name every one of its option constructors.
// Consumer options must be in a table row: the page keeps them in one.
var optionPages = []struct {
	dir, page string
	tableOnly bool
}{
	{"consumer", "processing.md", true},
	{"dedup/dynamostore", "stores.md", false},
	{"dedup/dynamostore/audit", "stores.md", false},
	{"dedup/pgstore", "stores.md", false},
	{"dedup/redisstore", "stores.md", false},
	{"sources/sqssource", "sources.md", false},
	{"sources/kafkagroup", "sources.md", false},
	{"sources/kafkasource", "sources.md", false},
	{"sources/franzsource", "sources.md", false},
	{"franztxn", "kafka-transactions.md", false},
	{"sources/memsource", "sources.md", false},
	{"dedup/cache", "stores.md", false},
	{"lambda/sqslambda", "lambda.md", false},
	{"lambda/kafkalambda", "lambda.md", false},
	{"idempotency", "idempotent-http.md", true},
	{"idempotency/httpidem", "idempotent-http.md", true},
	{"outbox", "sending-onward.md", true},
	{"batch", "choosing-a-mode.md", false},
}

// Every exported option constructor (a function whose one result is a type
// named …Option) of these packages is named in its reference page under
// docs/, so the tables cannot lag the code again.
func TestEveryOptionDocumented(t *testing.T) {
	total := 0
	for _, p := range optionPages {
		names := optionConstructors(t, filepath.Join("../..", p.dir))
		total += len(names)
		b, err := os.ReadFile(filepath.Join("../../docs", p.page))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if p.tableOnly {
			var rows []string
			for line := range strings.Lines(text) {
				if strings.HasPrefix(line, "|") {
					rows = append(rows, line)
				}
			}
			text = strings.Join(rows, "")
		}
		for _, n := range names {
			if !regexp.MustCompile(`\b` + n + `\b`).MatchString(text) {
				where := "docs/" + p.page
				if p.tableOnly {
					where += "'s options table"
				}
				t.Errorf("option %s.%s is not in %s", filepath.Base(p.dir), n, where)
			}
		}
	}
	if total == 0 {
		t.Fatal("no option constructors found: has the package list moved?")
	}
}

// optionConstructors lists the exported functions of the package in dir
// (tests left out) whose single result is a type whose name ends in Option,
// this package's or another's.
func optionConstructors(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("package %s: %v (moved? update optionPages)", dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			// Option, this package's or another's.
			result := fn.Type.Results.List[0].Type
			if sel, ok := result.(*ast.SelectorExpr); ok {
				result = sel.Sel
			}
			if id, ok := result.(*ast.Ident); ok && strings.HasSuffix(id.Name, "Option") {
				names = append(names, fn.Name.Name)
			}
		}
	}
	slices.Sort(names)
	return names
}
