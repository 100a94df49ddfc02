package names

import (
	"go/types"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// Every library package is configured and built one way: its options
// are an interface with an unexported method (so an option of another
// package, or of another constructor of the same package, does not
// compile where it means nothing), its constructors are
// New…(…, opts...) (*T, error), and its WithHooks takes its own Hook
// type.
func TestOneShape(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: "../.."}
	pkgs, err := packages.Load(cfg, "github.com/onceq/onceq/...")
	if err != nil {
		t.Fatal(err)
	}
	var options, constructors, hooks int
	for _, p := range pkgs {
		if p.Types == nil || !libraryPackage(p.PkgPath) {
			continue
		}
		scope := p.Types.Scope()
		for _, name := range scope.Names() {
			switch obj := scope.Lookup(name).(type) {
			case *types.TypeName:
				if !obj.Exported() || obj.IsAlias() || !strings.HasSuffix(name, "Option") {
					continue
				}
				options++
				if !sealed(obj.Type()) {
					t.Errorf("%s.%s is %s: an option is an interface with an unexported method, as every package's is",
						p.PkgPath, name, obj.Type().Underlying())
				}
			case *types.Func:
				if !obj.Exported() {
					continue
				}
				sig := obj.Type().(*types.Signature)
				if strings.HasPrefix(name, "New") {
					constructors++
					if !constructorShape(p.Types, sig) {
						t.Errorf("%s.%s returns %s: a constructor returns (*T, error)", p.PkgPath, name, sig.Results())
					}
				}
				if name == "WithHooks" {
					hooks++
					if !takesOwnHook(p.Types, sig) {
						t.Errorf("%s.WithHooks takes %s: hooks are given as ...Hook, the package's own type", p.PkgPath, sig.Params())
					}
				}
			}
		}
	}
	// Lower bounds from the tree as it is: a load that missed packages
	// would pass with nothing checked.
	if options < 15 || constructors < 20 || hooks < 8 {
		t.Fatalf("checked %d option types, %d constructors, %d WithHooks: the load missed packages", options, constructors, hooks)
	}
}

// libraryPackage reports whether path is a package users import: not
// internal, not a command, an example, an integration test or test
// support (storetest, sourcetest, ...: they take a *testing.T).
func libraryPackage(path string) bool {
	rest := strings.TrimPrefix(path, "github.com/onceq/onceq")
	for _, e := range strings.Split(rest, "/") {
		switch {
		case e == "internal", e == "cmd", e == "examples", e == "integration",
			strings.HasPrefix(e, "test"), strings.HasSuffix(e, "test"):
			return false
		}
	}
	return true
}

// sealed reports whether t is an interface with an unexported method.
func sealed(t types.Type) bool {
	iface, ok := t.Underlying().(*types.Interface)
	if !ok {
		return false
	}
	for i := range iface.NumMethods() {
		if !iface.Method(i).Exported() {
			return true
		}
	}
	return false
}

// constructorShape reports whether sig returns a pointer to a type of pkg
// and an error.
func constructorShape(pkg *types.Package, sig *types.Signature) bool {
	r := sig.Results()
	if r.Len() != 2 || r.At(1).Type().String() != "error" {
		return false
	}
	ptr, ok := r.At(0).Type().(*types.Pointer)
	if !ok {
		return false
	}
	named, ok := ptr.Elem().(*types.Named)
	return ok && named.Obj().Pkg() == pkg
}

// takesOwnHook reports whether sig's last parameter is ...Hook, of a Hook
// declared in pkg (or an alias of the stores' shared storeinstr.Hook).
func takesOwnHook(pkg *types.Package, sig *types.Signature) bool {
	if !sig.Variadic() {
		return false
	}
	last := sig.Params().At(sig.Params().Len() - 1).Type().(*types.Slice).Elem()
	named, ok := types.Unalias(last).(*types.Named)
	if !ok || named.Obj().Name() != "Hook" {
		return false
	}
	own := pkg.Scope().Lookup("Hook")
	return own != nil && types.Identical(own.Type(), last)
}
