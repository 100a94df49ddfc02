package httpidem_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/onceq/onceq/dedup/memstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
	"github.com/onceq/onceq/internal/testsupport/memstoretest"
)

// A business write refused by its own condition commits nothing: the
// request is answered, and replayed, with a 409 problem, not with the
// handler's response that assumed the write.
func TestWriteConditionRefusedIs409(t *testing.T) {
	run, err := idempotency.New(memstoretest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httpidem.New(run)
	if err != nil {
		t.Fatal(err)
	}
	applied := false
	srv := httptest.NewServer(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = httpidem.Tx(r).Write(memstore.Write{Check: func() error { return errors.New("out of stock") }, Apply: func() { applied = true }})
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	defer srv.Client().CloseIdleConnections()
	for i, replayed := range []string{"", "true"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/reservations", strings.NewReader("{}"))
		req.Header.Set(httpidem.HeaderKey, `"r-1"`)
		res, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusConflict || res.Header.Get("Content-Type") != "application/problem+json" ||
			!strings.Contains(string(body), "business condition") || res.Header.Get(httpidem.HeaderReplayed) != replayed {
			t.Errorf("request %d: %d %v %s, want the 409 problem (replayed %q)", i+1, res.StatusCode, res.Header, body, replayed)
		}
	}
	if applied {
		t.Error("the refused write was applied")
	}
}
