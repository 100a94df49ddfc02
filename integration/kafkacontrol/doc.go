// Package kafkacontrol holds the tests of the kafka-go source that need a
// broker the test controls (a join held, a commit refused, a topic not
// created on first use): franz-go's in-process broker, kfake, whose
// control hooks no broker across a network offers. They live here, in a
// module that may require franz-go, so that the kafka-go source's module
// does not: a kafka-go user inherits nothing of franz-go.
package kafkacontrol
