package dynamostore

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"
)

// Each sample bounds the offset to a second; intersecting samples taken at
// different sub-second phases narrows it, and a stepped clock (bounds
// disjoint from the rest) restarts the estimate from the new sample.
func TestClockOffsetIntersection(t *testing.T) {
	var c clockOffset
	const truth = 2300 * time.Millisecond // server ahead by 2.3 s
	base := time.Unix(1_000_000, 0)
	for _, phase := range []time.Duration{100, 450, 800} {
		sent := base.Add(phase * time.Millisecond)
		received := sent.Add(20 * time.Millisecond)
		date := sent.Add(10 * time.Millisecond).Add(truth).Truncate(time.Second)
		c.add(bounds{lo: date.Sub(received), hi: date.Add(time.Second).Sub(sent)})
		base = base.Add(time.Second)
	}
	off, ok := c.offset()
	if !ok || off < truth-200*time.Millisecond || off > truth+200*time.Millisecond {
		t.Fatalf("offset %v, want within 200ms of %v after three phases", off, truth)
	}
	c.add(bounds{lo: -time.Minute - time.Second, hi: -time.Minute})
	if off, _ = c.offset(); off > -time.Minute+time.Second || off < -time.Minute-time.Second {
		t.Fatalf("offset %v after the clock stepped to -1m", off)
	}
	if above, changed := c.crossed(time.Minute); !above || !changed {
		t.Fatal("a 1 minute offset is not over half a 1 minute margin")
	}
	if _, changed := c.crossed(time.Minute); changed {
		t.Fatal("the same crossing reported twice")
	}
}

// One sample leaves the offset uncertain by about half a second: a margin
// smaller than that must not refuse a clock that is right, while an
// offset surely beyond the margin is still refused.
func TestClockCheckAllowsForUncertainty(t *testing.T) {
	s := &Store{clock: &clockOffset{}, clockCheck: true, log: slog.New(slog.DiscardHandler)}
	now := time.Now()
	date := now.Truncate(time.Second)
	s.clock.add(bounds{lo: date.Sub(now.Add(time.Millisecond)), hi: date.Add(time.Second).Sub(now)})
	if u := s.clock.uncertainty(); u < 400*time.Millisecond {
		t.Fatalf("uncertainty %v after one sample, want about half a second", u)
	}
	if err := s.checkClock(context.Background(), time.Now(), 200*time.Millisecond); err != nil {
		t.Fatalf("a right clock refused under a 200ms margin: %v", err)
	}
	if err := s.checkClock(context.Background(), time.Now().Add(3*time.Second), 200*time.Millisecond); !errors.Is(err, ErrClockSkew) {
		t.Fatalf("a clock 3s ahead: %v, want ErrClockSkew", err)
	}
}
