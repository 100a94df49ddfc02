package hookset

import (
	"strings"
	"testing"
)

type greeter interface{ Greet() }
type leaver interface{ Leave() }

type both struct{}

func (both) Greet() {}
func (both) Leave() {}

type misspelt struct{}

func (misspelt) Gret() {}

func TestAddSortsByInterface(t *testing.T) {
	var gs []greeter
	var ls []leaver
	for _, h := range []any{both{}, both{}} {
		g, l := Add(&gs, h), Add(&ls, h)
		if !g || !l {
			t.Fatalf("Add reported %v %v for a hook implementing both", g, l)
		}
	}
	if len(gs) != 2 || len(ls) != 2 {
		t.Fatalf("got %d greeters, %d leavers; want 2 and 2", len(gs), len(ls))
	}
	if Add(&gs, misspelt{}) {
		t.Fatal("a misspelt hook was taken as a greeter")
	}
	if err := Unused("pkg", misspelt{}); err == nil || !strings.Contains(err.Error(), "hookset.misspelt") {
		t.Fatalf("Unused = %v, want the hook's type named", err)
	}
}
