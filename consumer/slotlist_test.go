package consumer

import (
	"slices"
	"testing"
)

func TestSlotList(t *testing.T) {
	var l slotList
	a, b, c := &slot{}, &slot{}, &slot{}
	for _, s := range []*slot{a, b, c} {
		l.add(s)
	}
	l.remove(b)
	l.remove(b) // twice: no effect
	if got := slices.Collect(l.all()); l.len() != 2 || !slices.Equal(got, []*slot{c, a}) {
		t.Fatalf("after removing the middle: %d held, %v", l.len(), got)
	}
	l.remove(c)
	l.remove(a)
	if l.len() != 0 || l.head != nil {
		t.Fatalf("emptied: %d held", l.len())
	}
	l.add(b)
	if got := slices.Collect(l.all()); !slices.Equal(got, []*slot{b}) {
		t.Fatalf("re-added: %v", got)
	}
}
