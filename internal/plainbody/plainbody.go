package plainbody

import (
	"io"
	"net/http"
)

// Doer is the HTTP client of the SDK's service clients (their
// HTTPClient option).
type Doer interface {
	Do(*http.Request) (*http.Response, error)
}

// Client wraps c so that request bodies reach it without WriteTo. A
// client already wrapped is returned as it is.
func Client(c Doer) Doer {
	if _, done := c.(client); done || c == nil {
		return c
	}
	return client{c}
}

type client struct{ Doer }

func (c client) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = body{r.Body}
	}
	return c.Doer.Do(r)
}

// body is an io.ReadCloser and nothing more.
type body struct{ io.ReadCloser }
