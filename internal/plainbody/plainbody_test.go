package plainbody_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/onceq/onceq/internal/plainbody"
)

type recordingDoer struct{ body io.ReadCloser }

func (d *recordingDoer) Do(r *http.Request) (*http.Response, error) {
	d.body = r.Body
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// A body with WriteTo, like smithy-go's, reaches the wrapped client
// without it; wrapping twice wraps once.
func TestClientHidesWriteTo(t *testing.T) {
	d := &recordingDoer{}
	c := plainbody.Client(plainbody.Client(d))
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	req.Body = io.NopCloser(strings.NewReader("{}"))
	if _, ok := req.Body.(io.WriterTo); !ok {
		t.Fatal("test body is no WriterTo")
	}
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.body.(io.WriterTo); ok {
		t.Fatal("body reached the client with WriteTo")
	}
	if b, _ := io.ReadAll(d.body); string(b) != "{}" {
		t.Fatalf("body %q", b)
	}
}
