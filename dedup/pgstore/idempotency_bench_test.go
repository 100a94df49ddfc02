package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/idempotency"
	"github.com/onceq/onceq/idempotency/httpidem"
	"github.com/onceq/onceq/internal/testsupport/sidebyside"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// BenchmarkIdempotencyKey measures the Idempotency-Key middleware over
// PostgreSQL beside a bare handler that makes the same store calls by
// hand, on one HTTP server and client in this process (32 requests in
// flight, one pool of 16 connections; internal/testsupport/sidebyside: interleaved
// rounds, median ratios). Every request is a new key and records one
// payment row, committed with COMPLETED: through the middleware, the
// handler hands the row over (idempotency.Write); by hand, the handler
// reads the body, claims the key with the fingerprint's hash, builds its
// response and completes with the row. CPU is the whole process's: HTTP
// client, server and pgx; PostgreSQL is another process.
//
//	go test -run '^$' -bench '^BenchmarkIdempotencyKey$' ./dedup/pgstore/
func BenchmarkIdempotencyKey(b *testing.B) {
	cfg, err := pgxpool.ParseConfig(testenv.PostgresURL(b))
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	p, err := pgxpool.NewWithConfig(b.Context(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	ctx := b.Context()
	table, payments := uniqueName("onceq_bench_idem"), uniqueName("onceq_bench_payments")
	if err := pgstore.CreateTable(ctx, p, table); err != nil {
		b.Fatal(err)
	}
	if _, err := p.Exec(ctx, "CREATE TABLE "+payments+" (id text PRIMARY KEY, amount bigint NOT NULL)"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = p.Exec(context.Background(), "DROP TABLE "+table+", "+payments) })
	st := newStore(b, p, table)
	insert := "INSERT INTO " + payments + " (id, amount) VALUES ($1, $2)"

	run, err := idempotency.New(st)
	if err != nil {
		b.Fatal(err)
	}
	mw, err := httpidem.New(run)
	if err != nil {
		b.Fatal(err)
	}
	// answer is the payment's response, the same on both sides.
	answer := func(w http.ResponseWriter, key string, body []byte) []byte {
		resp := fmt.Appendf(nil, `{"id":%q,"request":%s}`, key, body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/payments/"+key)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
		return resp
	}
	keyOf := func(r *http.Request) string { return strings.Trim(r.Header.Get(httpidem.HeaderKey), `"`) }
	mux := http.NewServeMux()
	// The server's goroutines carry the side's profile label too, as the
	// client's do (sidebyside), so that go tool pprof -tagfocus side=onceq
	// or side=min shows a side's server half with its client half.
	label := func(side string, h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pprof.Do(r.Context(), pprof.Labels("side", side), func(context.Context) { h.ServeHTTP(w, r) })
		})
	}
	mux.Handle("POST /idem/payments", label("onceq", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := keyOf(r)
		if err := httpidem.Tx(r).Write(pgstore.Exec{SQL: insert, Args: []any{key, 1250}}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		answer(w, key, body)
	}))))
	var owners atomic.Int64
	mux.Handle("POST /bare/payments", label("min", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		raw := keyOf(r)
		key, err := dedup.Key("idempotency", raw)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		now := time.Now()
		c, err := st.Claim(r.Context(), dedup.ClaimRequest{Key: key, PayloadHash: dedup.PayloadHash(httpidem.DefaultFingerprint(r, body)),
			Owner: strconv.FormatInt(owners.Add(1), 36), Now: now, LeaseUntil: now.Add(time.Minute), SkewMargin: 5 * time.Second})
		if err != nil || !c.Acquired {
			http.Error(w, fmt.Sprint("claim: ", err), http.StatusServiceUnavailable)
			return
		}
		rec := httptest.NewRecorder()
		resp := answer(rec, raw, body)
		err = st.Complete(r.Context(), dedup.CompleteRequest{Lease: c.Lease, Response: resp, Now: now, ExpiresAt: now.Add(24 * time.Hour),
			Writes: []dedup.Write{pgstore.Exec{SQL: insert, Args: []any{raw, 1250}}}})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		answer(w, raw, body)
	})))
	srv := httptest.NewServer(mux)
	b.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	b.Cleanup(client.CloseIdleConnections)
	var seq atomic.Int64
	side := func(path string) sidebyside.Side {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+path, strings.NewReader(`{"amount":1250,"currency":"EUR"}`))
			if err != nil {
				return err
			}
			req.Header.Set(httpidem.HeaderKey, `"bench-`+strconv.FormatInt(seq.Add(1), 10)+`"`)
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, res.Body)
			_ = res.Body.Close()
			if res.StatusCode != http.StatusCreated {
				return fmt.Errorf("%s: status %d", path, res.StatusCode)
			}
			return nil
		}
	}
	sidebyside.Run(b, sidebyside.Options{}, side("/idem/payments"), side("/bare/payments"))
}
