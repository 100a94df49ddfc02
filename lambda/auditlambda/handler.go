package auditlambda

import (
	"context"

	"github.com/aws/aws-lambda-go/events"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/onceq/onceq/dedup/dynamostore/audit"
)

// Handler returns a Lambda handler for an event source mapping on the
// idempotency table's DynamoDB stream: each batch goes to a's
// ApplyStreamRecords (tombstones of COMPLETED records TTL removed, TTL
// lag, doubled completions). An error fails the batch, which Lambda
// retries.
//
//	lambda.Start(auditlambda.Handler(auditor))
func Handler(a *audit.Auditor) func(context.Context, events.DynamoDBEvent) error {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		return a.ApplyStreamRecords(ctx, streamRecords(ev))
	}
}

// streamRecords converts a Lambda event's records to the Streams API's:
// the two SDKs have types of their own for the same records.
func streamRecords(ev events.DynamoDBEvent) []stypes.Record {
	out := make([]stypes.Record, 0, len(ev.Records))
	for _, r := range ev.Records {
		at := r.Change.ApproximateCreationDateTime.Time
		rec := stypes.Record{
			EventName: stypes.OperationType(r.EventName),
			AwsRegion: &r.AWSRegion,
			Dynamodb: &stypes.StreamRecord{
				ApproximateCreationDateTime: &at,
				Keys:                        streamImage(r.Change.Keys),
				OldImage:                    streamImage(r.Change.OldImage),
				NewImage:                    streamImage(r.Change.NewImage),
			},
		}
		if id := r.UserIdentity; id != nil {
			rec.UserIdentity = &stypes.Identity{Type: &id.Type, PrincipalId: &id.PrincipalID}
		}
		out = append(out, rec)
	}
	return out
}

// streamImage converts an image; a record's attributes are strings,
// numbers, binary and booleans, and other types are dropped.
func streamImage(m map[string]events.DynamoDBAttributeValue) map[string]stypes.AttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]stypes.AttributeValue, len(m))
	for k, v := range m {
		switch v.DataType() {
		case events.DataTypeString:
			out[k] = &stypes.AttributeValueMemberS{Value: v.String()}
		case events.DataTypeNumber:
			out[k] = &stypes.AttributeValueMemberN{Value: v.Number()}
		case events.DataTypeBinary:
			out[k] = &stypes.AttributeValueMemberB{Value: v.Binary()}
		case events.DataTypeBoolean:
			out[k] = &stypes.AttributeValueMemberBOOL{Value: v.Boolean()}
		}
	}
	return out
}
