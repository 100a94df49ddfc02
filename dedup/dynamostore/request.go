package dynamostore

import (
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// Aliases of the record's attributes in expressions: "#" and the name
// (several names are reserved words, so every one is aliased).
const (
	nPK       = "#" + attrPK
	nSK       = "#" + attrSK
	nStatus   = "#" + attrStatus
	nVersion  = "#" + attrVersion
	nOwner    = "#" + attrOwner
	nPayload  = "#" + attrPayload
	nAttempts = "#" + attrAttempts
	nCreated  = "#" + attrCreated
	nExpires  = "#" + attrExpires
	nLease    = "#" + attrLease
	nResponse = "#" + attrResponse
	nError    = "#" + attrError
	nTakeover = "#" + attrTakeovers
)

// request is one conditional update of a record, described once and sent
// as an UpdateItem or as a transaction's Update. Each name and value is
// recorded as the expression is written, so the request defines exactly
// what it uses (DynamoDB refuses one it does not) and nothing needs
// pruning afterwards.
//
// It costs about what expressions assembled by hand and pruned by a token
// scanner did, without the scanner. feature/dynamodb/expression builds and
// renders a tree with generated aliases on every call, many times the
// cost, so it is not used. BenchmarkClientCPU measures a whole Store call
// over the SDK; the figures are in BENCHMARKS.md.
type request struct {
	names             map[string]string
	values            map[string]types.AttributeValue
	set, remove, cond strings.Builder
	// fixed, when set, are the request's expressions, made once (form):
	// the builders are then unused.
	fixed *fixedForm
}

// fixedForm is a request's expressions, kept for requests of the same
// shape. The SDK only reads the strings and the names map.
type fixedForm struct{ update, cond *string }

// form is r without its values, for requests of r's shape made with with.
func (r *request) form() *request {
	return &request{names: r.names, fixed: &fixedForm{update: aws.String(r.expression()), cond: aws.String(r.cond.String())}}
}

// with is a request of form f's shape with values v.
func (f *request) with(v map[string]types.AttributeValue) *request {
	return &request{names: f.names, values: v, fixed: f.fixed}
}

// expressions are the update and condition expressions to send.
func (r *request) expressions() (update, cond *string) {
	if r.fixed != nil {
		return r.fixed.update, r.fixed.cond
	}
	return aws.String(r.expression()), aws.String(r.cond.String())
}

func newRequest() *request {
	// Sized for the largest request, a claim: 11 names, 8 values (which
	// then fit a map's one group), and expressions written without
	// growing.
	r := &request{names: make(map[string]string, 11), values: make(map[string]types.AttributeValue, 8)}
	r.set.Grow(224)
	r.remove.Grow(48)
	r.cond.Grow(96)
	return r
}

// name records alias ("#" and an attribute's name) and returns it.
func (r *request) name(alias string) string {
	r.names[alias] = alias[1:]
	return alias
}

// value records v as placeholder and returns the placeholder.
func (r *request) value(placeholder string, v types.AttributeValue) string {
	r.values[placeholder] = v
	return placeholder
}

// Set adds "alias = " and rhs (its parts written as given; names and
// values in them recorded by name and value) to the SET clause.
func (r *request) Set(alias string, rhs ...string) {
	if r.set.Len() == 0 {
		r.set.WriteString("SET ")
	} else {
		r.set.WriteString(", ")
	}
	r.set.WriteString(r.name(alias))
	r.set.WriteString(" = ")
	for _, p := range rhs {
		r.set.WriteString(p)
	}
}

// Remove adds attributes to the REMOVE clause.
func (r *request) Remove(aliases ...string) {
	for _, a := range aliases {
		if r.remove.Len() > 0 {
			r.remove.WriteString(", ")
		}
		r.remove.WriteString(r.name(a))
	}
}

// Where appends parts to the condition.
func (r *request) Where(parts ...string) {
	for _, p := range parts {
		r.cond.WriteString(p)
	}
}

// fence is the condition of Complete, Fail and Extend: the record is
// still the PENDING record of the lease.
func (r *request) fence(owner string, version int64) {
	r.Where(r.name(nOwner), " = ", r.value(":owner", str(owner)),
		" AND ", r.name(nVersion), " = ", r.value(":v", num(version)),
		" AND ", r.name(nStatus), " = ", r.value(":pending", str(string(dedup.StatusPending))))
}

func (r *request) expression() string {
	if r.remove.Len() == 0 {
		return r.set.String()
	}
	return r.set.String() + " REMOVE " + r.remove.String()
}

// updateItem is the request as one UpdateItem, returning the item's old
// values on success (rv) and on a condition failure.
func (r *request) updateItem(table *string, key map[string]types.AttributeValue, rv types.ReturnValue) *ddb.UpdateItemInput {
	update, cond := r.expressions()
	return &ddb.UpdateItemInput{
		TableName:                           table,
		Key:                                 key,
		UpdateExpression:                    update,
		ConditionExpression:                 cond,
		ExpressionAttributeNames:            r.names,
		ExpressionAttributeValues:           r.values,
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// transactItem is the request as a transaction's item.
func (r *request) transactItem(table *string, key map[string]types.AttributeValue) types.TransactWriteItem {
	update, cond := r.expressions()
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                           table,
		Key:                                 key,
		UpdateExpression:                    update,
		ConditionExpression:                 cond,
		ExpressionAttributeNames:            r.names,
		ExpressionAttributeValues:           r.values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}
