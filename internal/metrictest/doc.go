// Package metrictest gives tests a MeterProvider over an OpenTelemetry
// ManualReader and reads counters and gauges back from it. Only tests import it, so the SDK stays out of library code.
//
// Only tests import it.
package metrictest
