package kafkacore

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/sources/kafkagroup"
)

// CheckTimeout bounds a source's check of its brokers and topics (New,
// Check) when the caller's context sets no deadline: a broker that takes
// connections and never answers would otherwise hold New for ever.
const CheckTimeout = 30 * time.Second

// BoundCheck gives ctx the CheckTimeout unless it already has a deadline.
func BoundCheck(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, CheckTimeout)
}

// CheckBrokers refuses a broker address without a port, or with one that
// is not a port number.
func CheckBrokers(source string, addrs []string) error {
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		switch {
		case err != nil && !strings.Contains(a, ":"):
			return &kafkagroup.AddressError{Source: source, Address: a, Reason: "no port"}
		case err != nil:
			return &kafkagroup.AddressError{Source: source, Address: a, Reason: "not host:port (an IPv6 host goes in brackets)"}
		case port == "":
			return &kafkagroup.AddressError{Source: source, Address: a, Reason: "empty port"}
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return &kafkagroup.AddressError{Source: source, Address: a, Reason: "port " + strconv.Quote(port) + " is not a port number"}
		}
	}
	return nil
}
