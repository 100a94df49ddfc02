package dynamostore

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore/internal/items"
)

// The format of the records table's items is package items', which the
// auditor (package audit) reads too; the store's code names it so.
const (
	attrPK        = items.AttrPK
	attrSK        = items.AttrSK
	attrStatus    = items.AttrStatus
	attrVersion   = items.AttrVersion
	attrOwner     = items.AttrOwner
	attrPayload   = items.AttrPayload
	attrAttempts  = items.AttrAttempts
	attrCreated   = items.AttrCreated
	attrExpires   = items.AttrExpires
	attrLease     = items.AttrLease
	attrResponse  = items.AttrResponse
	attrError     = items.AttrError
	attrTakeovers = items.AttrTakeovers
	attrArchived  = items.AttrArchived
	maxEpoch      = items.MaxEpoch
)

func str(s string) types.AttributeValue { return items.Str(s) }
func num(n int64) types.AttributeValue  { return items.Num(n) }
func ceilUnix(t time.Time) int64        { return items.CeilUnix(t) }
func floorUnix(t time.Time) int64       { return items.FloorUnix(t) }
func unshard(pk string) string          { return items.Unshard(pk) }

func decodeRecord(m map[string]types.AttributeValue) (dedup.Record, error) {
	return items.DecodeRecord(m)
}

func getS(m map[string]types.AttributeValue, name string, required bool) (string, error) {
	return items.GetS(m, name, required)
}

func getN(m map[string]types.AttributeValue, name string, required bool, lo, hi int64) (int64, error) {
	return items.GetN(m, name, required, lo, hi)
}

func checkSchema(t *types.TableDescription, tenant bool) error { return items.CheckSchema(t, tenant) }
