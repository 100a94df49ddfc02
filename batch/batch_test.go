package batch_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/onceq/onceq/batch"
)

func TestCommitCheck(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	ok := batch.Commit{From: 10, Next: 12, Keys: []string{"a", "b"}, PayloadHashes: []string{"ha", "hb"}, Now: now, ExpiresAt: now.Add(time.Hour)}
	if err := ok.Check(); err != nil {
		t.Fatalf("a valid commit: %v", err)
	}
	if err := (batch.Commit{From: 0, Next: 0}).Check(); err != nil {
		t.Fatalf("an empty batch moving nothing: %v", err)
	}
	invalid := map[string]func(c *batch.Commit){
		"negative From":          func(c *batch.Commit) { c.From = -1 },
		"Next before From":       func(c *batch.Commit) { c.Next = 9 },
		"empty key":              func(c *batch.Commit) { c.Keys = []string{"a", ""}; c.PayloadHashes = nil },
		"keys expiring at once":  func(c *batch.Commit) { c.ExpiresAt = c.Now },
		"hashes not one per key": func(c *batch.Commit) { c.PayloadHashes = c.PayloadHashes[:1] },
		"hashes without keys":    func(c *batch.Commit) { c.Keys = nil },
	}
	for name, change := range invalid {
		c := ok
		change(&c)
		if err := c.Check(); !errors.Is(err, batch.ErrInvalidCommit) {
			t.Errorf("%s: %v, want batch.ErrInvalidCommit", name, err)
		}
	}
	dup := batch.Commit{From: 0, Next: 5, Keys: []string{"a", "b", "a", "c", "b", "a"}, Now: now, ExpiresAt: now.Add(time.Hour)}
	var de *batch.DuplicateKeysError
	if err := dup.Check(); !errors.As(err, &de) || !slices.Equal(de.Indexes, []int{2, 4, 5}) {
		t.Fatalf("keys repeated within a commit: %v, want a *DuplicateKeysError for [2 4 5]", err)
	}
	if ok.PayloadHash(1) != "hb" || dup.PayloadHash(1) != "" {
		t.Fatalf("PayloadHash: %q and %q, want hb and none", ok.PayloadHash(1), dup.PayloadHash(1))
	}
}
