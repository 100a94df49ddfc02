package hookset

import (
	"errors"
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

func TestCollectRefusesAHookNoneTakes(t *testing.T) {
	invalid := errors.New("invalid")
	var gs []greeter
	var ls []leaver
	if err := Collect("pkg", invalid, []any{both{}}, Into(&gs), Into(&ls)); err != nil {
		t.Fatalf("Collect(both) = %v", err)
	}
	if len(gs) != 1 || len(ls) != 1 {
		t.Fatalf("got %d greeters, %d leavers; want 1 and 1: a hook goes to every list it fits", len(gs), len(ls))
	}
	err := Collect("pkg", invalid, []any{both{}, misspelt{}}, Into(&gs), Into(&ls))
	if !errors.Is(err, invalid) || !strings.Contains(err.Error(), "hookset.misspelt") {
		t.Fatalf("Collect(misspelt) = %v, want it refused, wrapping the invalid-option error", err)
	}
}
