package storehistory_test

import (
	"context"
	"testing"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// Offsets records each call on the offset rows with what the checker
// needs: the tokens and offsets, and a refusal's kind.
func TestOffsetsRecordsCalls(t *testing.T) {
	var buf testenv.LogBuffer
	rec := storehistory.NewOffsets(memstoretest.New(t).Offsets(), &buf)
	ctx := context.Background()
	p := batch.Partition{Group: "g", Topic: "t", Partition: 3}
	l1, err := rec.Acquire(ctx, p, "m1")
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Commit(ctx, batch.Commit{Lease: l1, From: 0, Next: 7}); err != nil {
		t.Fatal(err)
	}
	l2, err := rec.Acquire(ctx, p, "m2")
	if err != nil {
		t.Fatal(err)
	}
	_ = rec.Commit(ctx, batch.Commit{Lease: l1, From: 7, Next: 9}) // fenced
	_ = rec.Commit(ctx, batch.Commit{Lease: l2, From: 3, Next: 9}) // mismatch
	_, _ = rec.Offset(ctx, batch.Partition{Group: "g", Topic: "t", Partition: 4})
	if _, err := rec.Offset(ctx, p); err != nil || rec.Err() != nil {
		t.Fatal(err, rec.Err())
	}
	es := events(t, &buf)
	if len(es) != 14 {
		t.Fatalf("%d events, want 14: %+v", len(es), es)
	}
	want := []struct {
		op, out, refusal  string
		token, from, next int64
	}{
		{storehistory.OpAcquire, "ok", "", l1.Token, 0, -1},
		{storehistory.OpCommit, "ok", "", l1.Token, 0, 7},
		{storehistory.OpAcquire, "ok", "", l2.Token, 0, 7},
		{storehistory.OpCommit, "fail", storehistory.RefusalFenced, l1.Token, 7, 9},
		{storehistory.OpCommit, "fail", storehistory.RefusalMismatch, l2.Token, 3, 9},
		{storehistory.OpOffset, "fail", "", 0, 0, 0},
		{storehistory.OpOffset, "ok", "", l2.Token, 0, 7},
	}
	for i, w := range want {
		call, ret := es[2*i], es[2*i+1]
		token, next := ret.Token, ret.Next
		if w.op == storehistory.OpCommit {
			token, next = call.Token, call.Next
		}
		if call.Op != w.op || ret.Outcome != w.out || ret.Refusal != w.refusal || token != w.token || call.From != w.from || next != w.next || call.ID != ret.ID {
			t.Errorf("call %d: %+v / %+v, want %+v", i, call, ret, w)
		}
	}
	if es[0].Key != "g/t/3" || es[0].Owner != "m1" || l2.Token <= l1.Token {
		t.Fatalf("first call %+v; tokens %d then %d", es[0], l1.Token, l2.Token)
	}
}
