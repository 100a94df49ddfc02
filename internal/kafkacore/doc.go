// Package kafkacore holds what onceq's two Kafka sources (sources/kafkasource over
// kafka-go, sources/franzsource over franz-go) share, so that they behave alike
// and a deployment can switch clients without reprocessing: the offset
// tracker, the record fingerprint and ID, the dead-letter headers, the
// metrics, and the hook interfaces. It imports no Kafka client.
package kafkacore
