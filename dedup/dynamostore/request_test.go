package dynamostore

import (
	"maps"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	p := newParts(s.layout)
	fenced := func(build func(r *request)) *request {
		r := newRequest()
		build(r)
		r.fence("o", 3)
		return r
	}
	for name, r := range map[string]*request{
		"claim":          s.claimRequest("o", "h", now, time.Second, dedup.StatusPending, 5, nil, nil),
		"claim complete": s.claimRequest("o", "h", now, 0, dedup.StatusCompleted, 5, []byte("r"), nil),
		"claim over a record seen": s.claimRequest("o", "h", now, time.Second, dedup.StatusPending, 5, nil,
			map[string]types.AttributeValue{attrVersion: num(3), attrStatus: str("COMPLETED"), attrAttempts: num(2)}),
		"claim over a record without a version": s.claimRequest("o", "h", now, time.Second, dedup.StatusPending, 5, nil,
			map[string]types.AttributeValue{attrStatus: str("FAILED"), attrAttempts: num(2)}),
		"complete": fenced(func(r *request) {
			r.Set(nStatus, r.value(":completed", str("COMPLETED")))
			r.Remove(nLease, nError, nResponse)
		}),
		"fail":                          fenced(func(r *request) { r.Set(nAttempts, nAttempts, " + ", r.value(":one", num(1))) }),
		"complete form":                 p.complete[0].with(p.completeValues(dedup.Lease{Owner: "o", Version: 2}, now, nil)),
		"complete form with a response": p.complete[1].with(p.completeValues(dedup.Lease{Owner: "o", Version: 2}, now, []byte("r"))),
	} {
		in := r.updateItem(aws.String("t"), nil, types.ReturnValueNone)
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

// Complete sends its made-once form with completeValues: the same request
// as the builder writes for the lease.
func TestCompleteFormIsTheBuilders(t *testing.T) {
	p := newParts(layout{})
	for _, resp := range [][]byte{nil, []byte("r")} {
		for _, l := range []dedup.Lease{{Key: "k", Owner: "o", Version: 1}, {Key: "k", Owner: "another", Version: 1 << 40}} {
			at := time.Unix(1_700_000_000, 5)
			want := completeRequest(l, at, resp).updateItem(aws.String("t"), nil, types.ReturnValueNone)
			got := p.complete[min(len(resp), 1)].with(p.completeValues(l, at, resp)).updateItem(aws.String("t"), nil, types.ReturnValueNone)
			if *got.UpdateExpression != *want.UpdateExpression || *got.ConditionExpression != *want.ConditionExpression ||
				!maps.Equal(got.ExpressionAttributeNames, want.ExpressionAttributeNames) {
				t.Fatalf("response %q: form %q %q %v, builder %q %q %v", resp, *got.UpdateExpression, *got.ConditionExpression,
					got.ExpressionAttributeNames, *want.UpdateExpression, *want.ConditionExpression, want.ExpressionAttributeNames)
			}
			if !maps.EqualFunc(got.ExpressionAttributeValues, want.ExpressionAttributeValues, func(a, b types.AttributeValue) bool {
				return reflect.DeepEqual(a, b)
			}) {
				t.Fatalf("lease %+v response %q: values %v, builder's %v", l, resp, got.ExpressionAttributeValues, want.ExpressionAttributeValues)
			}
		}
	}
}

// DynamoDB refuses a condition with redundant parentheses: a group that
// opens right into another ("((") or encloses one term. Every branch of
// the claim's takeover condition is written without one (DynamoDB Local
// checks them all in TestForeignRecordsRequestsAccepted; this runs
// without a server).
func TestClaimConditionHasNoRedundantParentheses(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	seens := map[string]map[string]types.AttributeValue{
		"unknown":          nil,
		"with a version":   {attrVersion: num(3), attrStatus: str("FAILED")},
		"without version":  {attrStatus: str("FAILED")},
		"version mistyped": {attrVersion: str("3")},
	}
	single := regexp.MustCompile(`(^|[^a-z_])\([^()]*\)`)
	for _, tenant := range []bool{false, true} {
		s := &Store{layout: layout{tenant: tenant}}
		for name, seen := range seens {
			for _, margin := range []time.Duration{0, time.Second} {
				for _, status := range []dedup.Status{dedup.StatusPending, dedup.StatusCompleted} {
					cond := *s.claimRequest("o", "h", now, margin, status, 5, nil, seen).updateItem(aws.String("t"), nil, types.ReturnValueNone).ConditionExpression
					if strings.Contains(cond, "((") {
						t.Errorf("tenant %v, seen %s, margin %v: %q opens a group into another", tenant, name, margin, cond)
					}
					for _, g := range single.FindAllString(cond, -1) {
						if !strings.Contains(g, " AND ") && !strings.Contains(g, " OR ") {
							t.Errorf("tenant %v, seen %s, margin %v: %q groups a single term %q", tenant, name, margin, cond, g)
						}
					}
				}
			}
		}
	}
}
