package pgstore

import (
	"slices"
	"unicode/utf8"
)

// names are the identifiers CreateTable makes for a records table: the
// schema prefix ("app." or "") and the last part of each, every one within
// PostgreSQL's 63 bytes and distinct from the others.
type names struct {
	schema            string
	records           string
	recordsExpiresIdx string
	outbox            string
	outboxSeq         string
	outboxPendingIdx  string
	outboxLaneIdx     string
	outboxExpiresIdx  string
	// outboxUnorderedIdx: the Pending entries with no OrderingKey, which
	// a lease takes in Seq order without reading the ordered lanes.
	outboxUnorderedIdx string
	offsets            string
}

// namesOf derives the names of the records table table (checked by
// checkName).
func namesOf(table string) names {
	last := lastPart(table)
	ob := fitName(last, outboxSuffix)
	n := names{
		schema:             table[:len(table)-len(last)],
		records:            last,
		outbox:             ob,
		outboxPendingIdx:   fitName(ob, "_pending_idx"),
		outboxLaneIdx:      fitName(ob, "_lane_idx"),
		outboxExpiresIdx:   fitName(ob, "_expires_idx"),
		outboxUnorderedIdx: fitName(ob, "_unordered_idx"),
		offsets:            offsetsName(last),
	}
	taken := []string{n.records, n.outbox, n.outboxPendingIdx, n.outboxLaneIdx, n.outboxExpiresIdx, n.outboxUnorderedIdx, n.offsets}
	n.recordsExpiresIdx = keepCut(last+"_expires_at_idx", taken, func() string { return fitName(last, "_expires_at_idx") })
	taken = append(taken, n.recordsExpiresIdx)
	n.outboxSeq = keepCut(n.outbox+"_seq", taken, func() string { return fitName(last, outboxSuffix+"_seq") })
	return n
}

// all lists the names' last parts.
func (n names) all() []string {
	return []string{n.records, n.recordsExpiresIdx, n.outbox, n.outboxSeq, n.outboxPendingIdx, n.outboxLaneIdx, n.outboxExpiresIdx, n.outboxUnorderedIdx, n.offsets}
}

// keepCut is name when it fits. A longer one is the name PostgreSQL cut
// it to, which earlier versions let it make, so that a sequence or index
// made then is found again; unless that cut name is taken by another of
// the table's names (it would name the wrong relation, or be skipped by
// IF NOT EXISTS): then other's name.
func keepCut(name string, taken []string, other func() string) string {
	if len(name) <= maxIdentifier {
		return name
	}
	if cut := clip(name); !slices.Contains(taken, cut) {
		return cut
	}
	return other()
}

// clip is name cut to maxIdentifier bytes at a character's start, as
// PostgreSQL cuts an identifier.
func clip(name string) string {
	n := maxIdentifier
	if len(name) <= n {
		return name
	}
	for n > 0 && !utf8.RuneStart(name[n]) {
		n--
	}
	return name[:n]
}
