// Package metrictest reads counters back from an OpenTelemetry ManualReader
// in tests. Only tests import it, so the SDK stays out of library code.
//
// Only tests import it.
package metrictest
