package auditlambda

import (
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	stypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// A stream event as Lambda delivers it becomes the Streams API's record:
// the event name, the identity that marks a TTL delete, the time and the
// images the Auditor reads.
func TestStreamRecords(t *testing.T) {
	at := time.Unix(1700003700, 0)
	ev := events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{{
		EventName: "REMOVE", AWSRegion: "eu-west-1",
		UserIdentity: &events.DynamoDBUserIdentity{Type: "Service", PrincipalID: "dynamodb.amazonaws.com"},
		Change: events.DynamoDBStreamRecord{
			ApproximateCreationDateTime: events.SecondsEpochTime{Time: at},
			Keys:                        map[string]events.DynamoDBAttributeValue{"pk": events.NewStringAttribute("k")},
			OldImage: map[string]events.DynamoDBAttributeValue{
				"status": events.NewStringAttribute("COMPLETED"), "version": events.NewNumberAttribute("2"),
				"response": events.NewBinaryAttribute([]byte("r")), "flag": events.NewBooleanAttribute(true),
			},
		},
	}, {EventName: "INSERT"}}}
	got := streamRecords(ev)
	if len(got) != 2 {
		t.Fatalf("%d records, want 2", len(got))
	}
	r := got[0]
	if r.EventName != stypes.OperationTypeRemove || *r.AwsRegion != "eu-west-1" ||
		*r.UserIdentity.Type != "Service" || *r.UserIdentity.PrincipalId != "dynamodb.amazonaws.com" ||
		!r.Dynamodb.ApproximateCreationDateTime.Equal(at) {
		t.Errorf("record %+v", r)
	}
	if k := r.Dynamodb.Keys["pk"].(*stypes.AttributeValueMemberS).Value; k != "k" {
		t.Errorf("key %q", k)
	}
	old := r.Dynamodb.OldImage
	if old["status"].(*stypes.AttributeValueMemberS).Value != "COMPLETED" || old["version"].(*stypes.AttributeValueMemberN).Value != "2" ||
		string(old["response"].(*stypes.AttributeValueMemberB).Value) != "r" || !old["flag"].(*stypes.AttributeValueMemberBOOL).Value {
		t.Errorf("old image %+v", old)
	}
	if got[1].UserIdentity != nil || got[1].Dynamodb.OldImage != nil {
		t.Errorf("an insert without identity or old image: %+v", got[1])
	}
}
