package dynamostore_test

import (
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/internal/awstest"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// bodyProbe is the HTTP client under the SDK: it notes whether request
// bodies reach it with WriteTo, then sends them.
type bodyProbe struct {
	next          aws.HTTPClient
	mu            sync.Mutex
	sent, writeTo int
}

func (p *bodyProbe) Do(r *http.Request) (*http.Response, error) {
	p.mu.Lock()
	p.sent++
	if _, ok := r.Body.(io.WriterTo); ok {
		p.writeTo++
	}
	p.mu.Unlock()
	return p.next.Do(r)
}

// The store's calls reach net/http with bodies that have no WriteTo (see
// internal/plainbody), though the caller's client hands them over with it.
func TestRequestBodiesWithoutWriteTo(t *testing.T) {
	ep := testenv.DynamoDBEndpoint(t)
	probe := &bodyProbe{next: awshttp.NewBuildableClient()}
	cfg := awstest.Config(t, ep)
	cfg.HTTPClient = probe
	client := ddb.NewFromConfig(cfg)
	table := recordsTable(t, client)
	probe.mu.Lock()
	callerWriteTo := probe.writeTo
	probe.sent, probe.writeTo = 0, 0
	probe.mu.Unlock()
	if callerWriteTo == 0 {
		t.Fatal("the caller's own calls carried no WriteTo: the probe sees nothing to hide")
	}
	st := newStore(t, client, table)
	at := clock()
	c := mustClaim(t, st, dedup.ClaimRequest{Key: uniqueKey(t), Owner: "a", Now: at(0), LeaseUntil: at(30)})
	if err := st.Complete(t.Context(), dedup.CompleteRequest{Lease: c.Lease, Now: at(1), ExpiresAt: at(3600)}); err != nil {
		t.Fatal(err)
	}
	probe.mu.Lock()
	defer probe.mu.Unlock()
	if probe.sent < 2 || probe.writeTo != 0 {
		t.Fatalf("%d of the store's %d requests reached net/http with WriteTo", probe.writeTo, probe.sent)
	}
}
