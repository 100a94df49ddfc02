// Package faultproxy is test support: an HTTP reverse proxy on loopback in
// front of DynamoDB Local (or any AWS JSON-protocol endpoint) that injects
// the faults a real service produces and the emulator never does:
// throttles, 5xx answers, reset connections, latency, a request-rate
// ceiling, and the answers of a deployment gone wrong (access denied, a
// table not found). Faults fire by rule (operation, table, Nth request,
// count, probability) and are counted, so a test can check exactly what
// its client saw. Probabilities draw from a seeded generator: one seed, one sequence.
//
// Only tests and the integration drivers import it.
package faultproxy
