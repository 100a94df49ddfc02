// Package kafkaboth holds the tests that need both Kafka clients: records
// key alike whether kafka-go or franz-go reads them, each source refuses
// the other's options, and a churning group keeps every effect exactly
// once over either source. They live here, in a module that may require
// both clients, so that neither source's module requires the other's
// client: a user of one Kafka source does not inherit the other.
package kafkaboth
