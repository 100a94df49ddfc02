// Package metrictest gives tests a MeterProvider built on the OpenTelemetry
// API alone and reads counters and gauges back from it, so the library
// module needs no OpenTelemetry SDK, even for its tests.
//
// Only tests import it.
package metrictest
