package names

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// go doc shows an alias's own comment and not the type it names, so an
// exported alias of a struct or an interface from another package
// (consumer.Message is broker.Message, dynamostore.CorruptRecordError is
// dedup's) must name every exported field or method in its comment, or a user reading go doc
// where they look would not see them.
func TestAliasesNameTheirMembers(t *testing.T) {
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
				if gd.Tok == token.CONST {
					checked += constantsShowValues(t, p, gd)
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
						if !inDoc {
							t.Errorf("%s.%s (an alias of %s) does not name %s in its comment",
								p.Name, ts.Name.Name, named.Obj().Pkg().Path()+"."+named.Obj().Name(), m)
						}
					}
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no alias of a struct or interface found: has the load missed packages?")
	}
	t.Logf("%d aliases of structs, interfaces and constants checked", checked)
}

// constantsShowValues checks that an exported string constant defined as
// another onceq package's (consumer.IdempotencyKeyAttribute is broker's)
// shows its value in its comment: go doc prints the other
// name, not the value. It returns how many it checked.
func constantsShowValues(t *testing.T, p *packages.Package, gd *ast.GenDecl) int {
	t.Helper()
	n := 0
	for _, s := range gd.Specs {
		vs, ok := s.(*ast.ValueSpec)
		if !ok {
			continue
		}
		for i, name := range vs.Names {
			if !name.IsExported() || i >= len(vs.Values) {
				continue
			}
			sel, ok := vs.Values[i].(*ast.SelectorExpr)
			if !ok {
				continue
			}
			// Another onceq package's: time.Second says what it is.
			if used, ok := p.TypesInfo.Uses[sel.Sel].(*types.Const); !ok || !strings.HasPrefix(used.Pkg().Path(), "github.com/onceq/onceq") {
				continue
			}
			// Strings (header and attribute names) are read by people and
			// other programs; an enumeration's number is not.
			c, ok := p.TypesInfo.Defs[name].(*types.Const)
			if !ok || c.Val().Kind() != constant.String {
				continue
			}
			n++
			doc := vs.Doc.Text() + gd.Doc.Text()
			shown := constant.StringVal(c.Val())
			if !strings.Contains(doc, shown) {
				t.Errorf("%s.%s is %s, which go doc does not show: say %s in its comment", p.Name, name.Name, sel.Sel.Name, shown)
			}
		}
	}
	return n
}
