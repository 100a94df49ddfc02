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
// exported alias of a struct or an interface from another package
// (consumer.Message is broker.Message; the Kafka sources' hooks,
// RebalanceEvent and CommitHeldError are an internal package's) must name
// every exported field or method in its comment, or a user reading go doc
// where they look would not see them.
func TestAliasesNameTheirMembers(t *testing.T) {
	// Fields known to be missing, each with where it is to be added. Empty
	// once the comment names them; a listed field that is named fails too,
	// so the list cannot outlive its reason.
	pending := map[string]bool{
		// consumer/ is being rewritten on another branch; a word each there.
		"consumer.Capabilities.Replayable":      true,
		"consumer.CommitHolder.LimitCommitHold": true,
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
					// The names go doc would not show: a struct's fields, an
					// interface's methods.
					var members []string
					switch u := named.Underlying().(type) {
					case *types.Struct:
						for i := range u.NumFields() {
							if u.Field(i).Exported() {
								members = append(members, u.Field(i).Name())
							}
						}
					case *types.Interface:
						for i := range u.NumMethods() {
							if u.Method(i).Exported() {
								members = append(members, u.Method(i).Name())
							}
						}
					default:
						continue
					}
					doc := ts.Doc.Text()
					if doc == "" {
						doc = gd.Doc.Text()
					}
					checked++
					for _, m := range members {
						inDoc := regexp.MustCompile(`\b` + m + `\b`).MatchString(doc)
						where := p.Name + "." + ts.Name.Name + "." + m
						switch {
						case !inDoc && !pending[where]:
							t.Errorf("%s.%s (an alias of %s) does not name %s in its comment",
								p.Name, ts.Name.Name, named.Obj().Pkg().Path()+"."+named.Obj().Name(), m)
						case inDoc && pending[where]:
							t.Errorf("%s is named now: drop it from pending", where)
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no alias of a struct or interface found: has the load missed packages?")
	}
	t.Logf("%d aliases of structs and interfaces checked", checked)
}
