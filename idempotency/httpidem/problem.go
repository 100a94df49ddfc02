package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// problem is a problem details object (RFC 9457).
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

// problemBody is p as JSON.
func problemBody(p problem) []byte {
	b, _ := json.Marshal(p) // strings and an int: cannot fail
	return b
}

// writeProblem answers with a problem details body, and Retry-After when
// retryAfter is positive.
func (m *Middleware) writeProblem(w http.ResponseWriter, status int, detail string, retryAfter time.Duration) {
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((retryAfter+time.Second-1)/time.Second), 10))
	}
	w.WriteHeader(status)
	_, _ = w.Write(problemBody(m.problem(status, detail)))
}

func (m *Middleware) problem(status int, detail string) problem {
	return problem{Type: m.cfg.docs, Title: http.StatusText(status), Status: status, Detail: detail}
}
