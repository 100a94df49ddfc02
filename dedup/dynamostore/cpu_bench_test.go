package dynamostore_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
)

// cannedDoer answers every request with 200 and an empty JSON object, so
// a benchmark over it measures the client side alone: building the
// request, the SDK's serialization and signing, reading the answer.
type cannedDoer struct{}

func (cannedDoer) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		StatusCode: 200,
		Header:     http.Header{"Content-Type": {"application/x-amz-json-1.0"}, "Date": {time.Now().UTC().Format(http.TimeFormat)}},
		Body:       io.NopCloser(strings.NewReader("{}")),
		Request:    r,
	}, nil
}

// BenchmarkClientCPU is the client's CPU and allocations per store call,
// with no server behind it:
//
//	go test -run '^$' -bench BenchmarkClientCPU -benchmem ./dedup/dynamostore/
func BenchmarkClientCPU(b *testing.B) {
	client := ddb.New(ddb.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		BaseEndpoint: aws.String("http://127.0.0.1:1"),
		HTTPClient:   cannedDoer{},
	})
	st := newStore(b, client, "bench")
	now := time.Now()
	lease := dedup.Lease{Key: "bench#k", Owner: "owner-token-0123456789", Version: 3}
	resp := []byte(`{"order":42,"ok":true}`)
	// The same requests by hand over the same client, as BenchmarkDynamoDB
	// sends its "own" side: the gap is the store's own work per call.
	raw := ddb.New(client.Options(), func(o *ddb.Options) { o.Retryer = aws.NopRetryer{} })
	shapes := benchShapes{raw: raw, ownTable: "bench", now: now, lease: now.Add(time.Minute), keep: now.Add(time.Hour), resp: resp}
	for _, bc := range []struct {
		name string
		op   func(b *testing.B) error
	}{
		{"Claim", func(b *testing.B) error {
			_, err := st.Claim(b.Context(), dedup.ClaimRequest{Key: "bench#k", PayloadHash: "h", Owner: lease.Owner, Now: now, LeaseUntil: now.Add(time.Minute)})
			return err
		}},
		{"RawClaim", func(b *testing.B) error { return shapes.ownClaim(b.Context(), lease.Key) }},
		{"ClaimComplete", func(b *testing.B) error {
			_, err := st.ClaimComplete(b.Context(), dedup.ClaimCompleteRequest{Key: "bench#k", PayloadHash: "h", Owner: lease.Owner, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)})
			return err
		}},
		{"RawClaimComplete", func(b *testing.B) error { return shapes.ownClaimComplete(b.Context(), lease.Key) }},
		{"Complete", func(b *testing.B) error {
			return st.Complete(b.Context(), dedup.CompleteRequest{Lease: lease, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)})
		}},
		{"RawComplete", func(b *testing.B) error {
			_, err := raw.UpdateItem(b.Context(), shapes.ownCompleteItem(lease.Key))
			return err
		}},
		{"Fail", func(b *testing.B) error {
			return st.Fail(b.Context(), dedup.FailRequest{Lease: lease, Reason: "boom", Now: now, RetryAt: now.Add(time.Second)})
		}},
		{"Extend", func(b *testing.B) error {
			return st.Extend(b.Context(), dedup.ExtendRequest{Lease: lease, Now: now, LeaseUntil: now.Add(time.Minute)})
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := bc.op(b); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
