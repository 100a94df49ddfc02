package dynamostore

import (
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
)

// Write is a business write: one item of the TransactWriteItems that
// writes COMPLETED. It is a types.TransactWriteItem under a type of the
// Store's own, so that it is a dedup.Write: write it as
// dynamostore.Write{Put: ...}, or convert an item, dynamostore.Write(item).
type Write types.TransactWriteItem

// Kind is the kind of business write the Store commits: Write's.
const Kind dedup.WriteKind = "dynamostore"

// WriteKind implements dedup.Write.
func (Write) WriteKind() dedup.WriteKind { return Kind }
