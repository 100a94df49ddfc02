package sqs

import (
	"io"
	"net/http"
	"strings"
	"testing"

	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
)

type recordingDoer struct{ body io.ReadCloser }

func (d *recordingDoer) Do(r *http.Request) (*http.Response, error) {
	d.body = r.Body
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// callOptions must hide the request body's WriteTo from net/http (see
// package plainbody), and wrap a client only once.
func TestCallOptionsHideWriteTo(t *testing.T) {
	d := &recordingDoer{}
	o := awssqs.Options{HTTPClient: d}
	callOptions(&o)
	once := o.HTTPClient
	callOptions(&o)
	if o.HTTPClient != once {
		t.Fatal("client wrapped twice")
	}
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	req.Body = io.NopCloser(strings.NewReader("{}")) // a WriterTo, like smithy-go's body
	if _, ok := req.Body.(io.WriterTo); !ok {
		t.Fatal("test body is no WriterTo")
	}
	if _, err := o.HTTPClient.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.body.(io.WriterTo); ok {
		t.Fatal("body reached net/http with WriteTo")
	}
	if o.Retryer == nil {
		t.Fatal("SDK retryer not replaced")
	}
}
