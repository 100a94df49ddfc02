// Package telemetry holds the tests that read the consumer's spans and
// metrics through the OpenTelemetry SDK, kept in the integration module so
// the library module requires only the OpenTelemetry API.
package telemetry
