package dynamostore

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/onceq/onceq/retry"
)

// ErrClockSkew: a claim's Now is further from DynamoDB's clock than the
// request's SkewMargin. errors.Is holds for every *ClockSkewError.
var ErrClockSkew = errors.New("dynamostore: clock skew beyond the margin")

// ClockSkewError refuses a claim whose Now disagrees with DynamoDB's clock
// (as the store measures it) by more than its SkewMargin: the margin is
// what keeps workers from taking each other's live leases, so a clock off
// by more makes the claim unsafe. Nothing is written.
type ClockSkewError struct {
	// Skew is the request's Now minus the estimated server time.
	Skew   time.Duration
	Margin time.Duration
}

func (e *ClockSkewError) Error() string {
	return fmt.Sprintf("%s: Now is %v from DynamoDB's clock, the margin is %v", ErrClockSkew, e.Skew.Round(time.Millisecond), e.Margin)
}

// Is makes errors.Is(err, ErrClockSkew) true.
func (e *ClockSkewError) Is(target error) bool { return target == ErrClockSkew }

// RetryClass: a clock that far off is the host's fault, not the message's.
func (e *ClockSkewError) RetryClass() retry.Class { return retry.Misconfigured }

// maxClockSamples bounds the samples whose bounds are intersected: enough
// for the one-second Date resolution to narrow the estimate, few enough
// that a slow drift or a stepped clock is followed.
const maxClockSamples = 32

// clockOffset estimates server time minus local time from the Date header
// of DynamoDB's responses. Date has one-second resolution: a response
// received between sent and received with Date D says the offset is in
// [D - received, D + 1s - sent). The estimate is the middle of the
// intersection of the recent samples' bounds.
type clockOffset struct {
	mu      sync.Mutex
	samples [maxClockSamples]bounds
	n, next int
	est     time.Duration
	unc     time.Duration // half the width of the intersection: est ± unc
	known   bool
	warned  bool // |est| above half a request's margin was logged
}

type bounds struct{ lo, hi time.Duration }

// observe takes a sample from a call's response or error, if it has a
// Date header.
func (c *clockOffset) observe(sent, received time.Time, md middleware.Metadata, err error) {
	var h http.Header
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		h = resp.Header
	} else if re := (*smithyhttp.ResponseError)(nil); errors.As(err, &re) && re.Response != nil {
		h = re.Response.Header
	}
	d := h.Get("Date")
	if d == "" {
		return
	}
	date, perr := http.ParseTime(d)
	if perr != nil {
		return
	}
	c.add(bounds{lo: date.Sub(received), hi: date.Add(time.Second).Sub(sent)})
}

func (c *clockOffset) add(b bounds) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples[c.next] = b
	c.next = (c.next + 1) % maxClockSamples
	c.n = min(c.n+1, maxClockSamples)
	lo, hi := b.lo, b.hi
	for i := range c.n {
		lo, hi = max(lo, c.samples[i].lo), min(hi, c.samples[i].hi)
	}
	if lo > hi {
		// Disjoint bounds: a clock stepped. Start again from this sample.
		c.samples[0], c.n, c.next = b, 1, 1
		lo, hi = b.lo, b.hi
	}
	c.est, c.unc, c.known = lo+(hi-lo)/2, (hi-lo)/2, true
}

// offset is the estimate, 0 until the first response is seen.
func (c *clockOffset) offset() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.est, c.known
}

// uncertainty is how far the true offset may be from the estimate: about
// half a second after one sample, less as samples narrow it.
func (c *clockOffset) uncertainty() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.unc
}

// crossed reports whether |offset| just went above half of margin (true,
// true) or back under it (false, true), so that the crossing is logged
// once, not on every claim.
func (c *clockOffset) crossed(margin time.Duration) (above, changed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	above = c.known && margin > 0 && abs(c.est)-c.unc > margin/2
	changed = above != c.warned
	c.warned = above
	return above, changed
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
