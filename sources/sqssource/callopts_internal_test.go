package sqssource

import (
	"testing"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// callOptions must hide the request body's WriteTo from net/http (see
// package plainbody), and wrap a client only once.
func TestCallOptionsHideWriteTo(t *testing.T) {
	d := &testenv.BodyRecorder{}
	o := awssqs.Options{HTTPClient: d}
	callOptions(&o)
	once := o.HTTPClient
	callOptions(&o)
	if o.HTTPClient != once {
		t.Fatal("client wrapped twice")
	}
	testenv.CheckWriteToHidden(t, o.HTTPClient, d)
	if o.Retryer == nil {
		t.Fatal("SDK retryer not replaced")
	}
}
