package dynamostore

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// parts are the constant parts of a store's requests, made once in New
// and only read afterwards (the SDK's serializers only read what they are
// given), so that a call makes just what varies.
type parts struct {
	// absent is the absent-key condition of a claim's Put (notExists as a
	// whole condition), and absentNames its names.
	absent      *string
	absentNames map[string]string
	// Values every new record holds.
	zero, one, pending, completed types.AttributeValue
	// complete is Complete's expressions and names, without a response
	// and with one: per call only the values are made (completeValues,
	// which a test keeps equal to completeRequest's).
	complete [2]*request
}

func newParts(l layout) *parts {
	p := &parts{
		absent:      aws.String("attribute_not_exists(" + nPK + ")"),
		absentNames: map[string]string{nPK: attrPK},
		zero:        &types.AttributeValueMemberN{Value: "0"},
		one:         &types.AttributeValueMemberN{Value: "1"},
		pending:     str(string(dedup.StatusPending)),
		completed:   str(string(dedup.StatusCompleted)),
	}
	if l.tenant {
		p.absent = aws.String("(attribute_not_exists(" + nPK + ") AND attribute_not_exists(" + nSK + "))")
		p.absentNames = map[string]string{nPK: attrPK, nSK: attrSK}
	}
	lease := dedup.Lease{Owner: "o", Version: 1}
	p.complete[0] = completeRequest(lease, time.Unix(0, 0), nil).form()
	p.complete[1] = completeRequest(lease, time.Unix(0, 0), []byte{0}).form()
	return p
}

// status is s as an attribute value.
func (p *parts) status(s dedup.Status) types.AttributeValue {
	switch s {
	case dedup.StatusPending:
		return p.pending
	case dedup.StatusCompleted:
		return p.completed
	}
	return str(string(s))
}
