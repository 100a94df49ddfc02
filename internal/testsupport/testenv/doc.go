// Package testenv gives tests the endpoints of the real servers that
// integration/servers.sh starts (DynamoDB Local, the fauxqs SQS emulator,
// PostgreSQL and Redis) and the small helpers every package's tests want:
// a bounded context, a condition polled until it holds, a logger, a log
// buffer to read back, and the check that an HTTP client hides WriteTo
// (package plainbody). An aws.Config for the first two is package
// awstest's. Only tests and test-support packages import it.
//
// Start the servers and export their endpoints, from the repository root:
//
//	bash integration/servers.sh start
//	set -a; . integration/.run/env; set +a
//	go test github.com/onceq/onceq/...
//	bash integration/servers.sh stop
//
// Without the endpoint variables a test that needs a server is skipped,
// except under CI=true, where it fails: CI must never pass by skipping.
//
// Only tests import it.
package testenv
