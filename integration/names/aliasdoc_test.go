package names

import (
	"go/ast"
	"go/types"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// go doc shows an alias's own comment and not the type it names, so an
// exported alias of a struct from another package (consumer.Message is
// broker.Message; the Kafka sources' RebalanceEvent and CommitHeldError
// are an internal package's) must name every exported field in its
// comment, or a user reading go doc where they look would not see them.
func TestAliasesNameTheirFields(t *testing.T) {
	// Fields known to be missing, each with where it is to be added. Empty
	// once the comment names them; a listed field that is named fails too,
	// so the list cannot outlive its reason.
	pending := map[string]bool{
		// consumer/ is being rewritten on another branch; one word there.
		"consumer.Capabilities.Replayable": true,
	}
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes | packages.NeedSyntax | packages.NeedTypesInfo, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "github.com/onceq/onceq/...")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range pkgs {
		if strings.Contains(p.PkgPath, "/internal/") || strings.Contains(p.PkgPath, "/integration") ||
			strings.Contains(p.PkgPath, "/examples") || strings.Contains(p.PkgPath, "/cmd/") || p.Types == nil {
			continue
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok {
					continue
				}
				for _, s := range gd.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Assign.IsValid() || !ts.Name.IsExported() {
						continue
					}
					named, ok := types.Unalias(p.TypesInfo.Defs[ts.Name].Type()).(*types.Named)
					if !ok || named.Obj().Pkg() == p.Types {
						continue
					}
					st, ok := named.Underlying().(*types.Struct)
					if !ok {
						continue
					}
					doc := ts.Doc.Text()
					if doc == "" {
						doc = gd.Doc.Text()
					}
					checked++
					for i := range st.NumFields() {
						fld := st.Field(i)
						if !fld.Exported() {
							continue
						}
						inDoc := regexp.MustCompile(`\b` + fld.Name() + `\b`).MatchString(doc)
						where := p.Name + "." + ts.Name.Name + "." + fld.Name()
						switch {
						case !inDoc && !pending[where]:
							t.Errorf("%s.%s (an alias of %s) does not name its field %s in its comment",
								p.Name, ts.Name.Name, named.Obj().Pkg().Path()+"."+named.Obj().Name(), fld.Name())
						case inDoc && pending[where]:
							t.Errorf("%s is named now: drop it from pending", where)
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no alias of a struct found: has the load missed packages?")
	}
	t.Logf("%d aliases of structs checked", checked)
}
