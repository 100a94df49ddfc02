// Package names checks that a name means one thing across onceq: a hook
// method (one observer may serve the consumer, a store and a source at
// once, which only works if no two packages ask for the same method with
// different signatures) and the configuration error.
package names

import (
	"go/types"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

func TestHookMethodsOneSignature(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "github.com/onceq/onceq/...")
	if err != nil {
		t.Fatal(err)
	}
	// name -> signature -> interfaces asking for it
	seen := map[string]map[string][]string{}
	hooks := 0
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		if p.Types == nil || strings.HasSuffix(p.PkgPath, "_test") {
			continue
		}
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			tn, ok := scope.Lookup(name).(*types.TypeName)
			if !ok || !tn.Exported() || tn.IsAlias() {
				continue
			}
			iface, ok := tn.Type().Underlying().(*types.Interface)
			if !ok {
				continue
			}
			for i := range iface.NumMethods() {
				m := iface.Method(i)
				if !isHook(m.Name()) {
					continue
				}
				hooks++
				// Qualified by path, so two packages' Message types differ.
				sig := types.TypeString(m.Type(), nil)
				if seen[m.Name()] == nil {
					seen[m.Name()] = map[string][]string{}
				}
				seen[m.Name()][sig] = append(seen[m.Name()][sig], p.PkgPath+"."+name)
			}
		}
	}
	if hooks < 20 {
		t.Fatalf("found %d hook methods; the load missed packages", hooks)
	}
	for name, sigs := range seen {
		if len(sigs) < 2 {
			continue
		}
		var lines []string
		for sig, at := range sigs {
			lines = append(lines, "\t"+strings.Join(at, ", ")+": "+sig)
		}
		sort.Strings(lines)
		t.Errorf("%s has %d signatures:\n%s", name, len(sigs), strings.Join(lines, "\n"))
	}
}

// isHook reports whether name is a hook method: On followed by a capital.
func isHook(name string) bool {
	return len(name) > 2 && strings.HasPrefix(name, "On") && name[2] >= 'A' && name[2] <= 'Z'
}
