package main

import (
	"io"
	"strings"
	"testing"
)

// -txn's flags: franz-go only, alone (no -batch or -pipeline), at least
// one output per input, and no store's servers needed; every process of
// the pool is a txn worker, each slot with its own transactional ID.
func TestTxnFlags(t *testing.T) {
	t.Setenv("ONCEQ_DYNAMODB_ENDPOINT", "")
	t.Setenv("ONCEQ_SQS_ENDPOINT", "")
	for _, args := range [][]string{
		{"-txn"},
		{"-txn", "-source", "kafka"},
		{"-txn", "-source", "franz", "-batch"},
		{"-txn", "-source", "franz", "-pipeline"},
		{"-txn", "-source", "franz", "-txn-outputs", "0"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q: accepted", strings.Join(args, " "))
		}
	}
	cfg, err := parseFlags([]string{"-txn", "-source", "franz", "-workers", "2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if processes(cfg) != 2 || roleOf(cfg, 0) != roleTxn || roleOf(cfg, 1) != roleTxn {
		t.Fatalf("%d processes, roles %v %v", processes(cfg), roleOf(cfg, 0), roleOf(cfg, 1))
	}
	if a, b := txnID("ab", 0), txnID("ab", 1); a == b || a != txnID("ab", 0) || strings.Contains(b, "-0") {
		t.Fatalf("transactional IDs %q and %q: not one per slot, the same across restarts", a, b)
	}
	ds, inputs := txnPlan(cfg)
	if len(ds) != cfg.orders || len(inputs) != cfg.orders || inputs[ds[0].id] != cfg.txnOutputs || ds[0].key != ds[0].id {
		t.Fatalf("%d deliveries, %d inputs; first %+v", len(ds), len(inputs), ds[0])
	}
}
