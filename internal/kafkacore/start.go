package kafkacore

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/onceq/onceq/internal/configerr"
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

// AddressError is New's error for a broker address that is not host:port
// (Kafka clients would quietly dial a default port instead). It wraps
// ErrInvalidConfig.
type AddressError struct {
	// Source is the package that refused it: kafkasource or franzsource.
	Source string
	// Address is the broker address as given.
	Address string
	// Reason says what is wrong with it.
	Reason string
}

func (e *AddressError) Error() string {
	return fmt.Sprintf("%s: %v: broker address %q: %s, want host:port", e.Source, configerr.ErrInvalidConfig, e.Address, e.Reason)
}

// Unwrap makes the error match ErrInvalidConfig.
func (e *AddressError) Unwrap() error { return configerr.ErrInvalidConfig }

// CheckBrokers refuses a broker address without a port, or with one that
// is not a port number.
func CheckBrokers(source string, addrs []string) error {
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		switch {
		case err != nil && !strings.Contains(a, ":"):
			return &AddressError{Source: source, Address: a, Reason: "no port"}
		case err != nil:
			return &AddressError{Source: source, Address: a, Reason: "not host:port (an IPv6 host goes in brackets)"}
		case port == "":
			return &AddressError{Source: source, Address: a, Reason: "empty port"}
		}
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return &AddressError{Source: source, Address: a, Reason: "port " + strconv.Quote(port) + " is not a port number"}
		}
	}
	return nil
}
