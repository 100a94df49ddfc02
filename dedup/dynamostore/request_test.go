package dynamostore

import (
	"regexp"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

var exprToken = regexp.MustCompile(`[#:][A-Za-z0-9_]+`)

// Every request defines exactly the names and values its expressions use
// (DynamoDB refuses both an undefined and an unused one), and each alias
// stands for its attribute.
func TestRequestDefinesWhatItUses(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := &Store{layout: layout{tenant: true}}
	fenced := func(build func(r *request)) *request {
		r := newRequest()
		build(r)
		r.fence("o", 3)
		return r
	}
	for name, r := range map[string]*request{
		"claim":          s.claimRequest("o", "h", now, time.Second, dedup.StatusPending, 5, nil),
		"claim complete": s.claimRequest("o", "h", now, 0, dedup.StatusCompleted, 5, []byte("r")),
		"complete": fenced(func(r *request) {
			r.Set(nStatus, r.value(":completed", str("COMPLETED")))
			r.Remove(nLease, nError, nResponse)
		}),
		"fail with refund": fenced(func(r *request) { r.Set(nAttempts, nAttempts, " - ", r.value(":one", num(1))) }),
	} {
		in := r.updateItem("t", nil, types.ReturnValueNone)
		used := map[string]bool{}
		for _, e := range []string{*in.UpdateExpression, *in.ConditionExpression} {
			for _, tok := range exprToken.FindAllString(e, -1) {
				used[tok] = true
				_, isName := in.ExpressionAttributeNames[tok]
				_, isValue := in.ExpressionAttributeValues[tok]
				if !isName && !isValue {
					t.Errorf("%s: %s used but not defined in %q", name, tok, e)
				}
			}
		}
		for alias, attr := range in.ExpressionAttributeNames {
			if !used[alias] || alias != "#"+attr {
				t.Errorf("%s: name %s (%s) defined but unused, or not its attribute's", name, alias, attr)
			}
		}
		for ph := range in.ExpressionAttributeValues {
			if !used[ph] {
				t.Errorf("%s: value %s defined but unused", name, ph)
			}
		}
	}
}
