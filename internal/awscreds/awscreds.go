// Package awscreds says plainly when an AWS call failed for want of
// credentials. The SDK reports it as the end of its provider chain ("get
// identity: get credentials: failed to refresh cached credentials, no EC2
// IMDS role found, operation error ec2imds: ..."), which reads as an EC2
// problem to someone who simply has no credentials set.
//
// It imports only retry (the class its error carries: Misconfigured); the
// packages that own an AWS client import it.
package awscreds

import (
	"errors"
	"strings"

	"github.com/onceq/onceq/retry"
)

// Error is a call that failed before it was sent because no credentials
// could be had. errors.As reaches the SDK's error through Unwrap.
type Error struct {
	// None: the SDK's chain found no credentials anywhere (it ended at the
	// EC2 instance metadata service); otherwise a provider failed.
	None bool
	err  error
}

func (e *Error) Error() string {
	if e.None {
		return "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role"
	}
	return "AWS credentials could not be loaded: " + e.err.Error()
}

// Unwrap gives the SDK's error.
func (e *Error) Unwrap() error { return e.err }

// RetryClass: no retry brings credentials; the deployment must change.
func (e *Error) RetryClass() retry.Class { return retry.Misconfigured }

// Explain returns err as an *Error when it is the SDK's failure to get
// credentials, and err itself otherwise.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var done *Error
	if errors.As(err, &done) {
		return err
	}
	msg := err.Error()
	// The SDK's auth middleware prefixes every identity failure so, in
	// every service client.
	if !strings.Contains(msg, "get identity: ") {
		return err
	}
	return &Error{None: strings.Contains(msg, "no EC2 IMDS role found"), err: err}
}
