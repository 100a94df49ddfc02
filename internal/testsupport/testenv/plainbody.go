package testenv

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BodyRecorder is an HTTP client that answers 200 and keeps the body of
// the last request it was sent.
type BodyRecorder struct{ Body io.ReadCloser }

// Do implements the SDK's HTTPClient.
func (d *BodyRecorder) Do(r *http.Request) (*http.Response, error) {
	d.Body = r.Body
	return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
}

// CheckWriteToHidden sends c a request whose body has WriteTo, as
// smithy-go's does, and fails the test unless the body reaches rec (the
// client c wraps) intact and without WriteTo: the plainbody workaround,
// checked the same way wherever it is wired in.
func CheckWriteToHidden(t testing.TB, c interface {
	Do(*http.Request) (*http.Response, error)
}, rec *BodyRecorder) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
	req.Body = io.NopCloser(strings.NewReader("{}"))
	if _, ok := req.Body.(io.WriterTo); !ok {
		t.Fatal("test body is no WriterTo")
	}
	if _, err := c.Do(req); err != nil {
		t.Fatal(err)
	}
	if _, ok := rec.Body.(io.WriterTo); ok {
		t.Fatal("body reached the wrapped client with WriteTo")
	}
	if b, _ := io.ReadAll(rec.Body); string(b) != "{}" {
		t.Fatalf("body %q", b)
	}
}
