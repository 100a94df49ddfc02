// Package kafkacore holds what onceq's two Kafka sources (sources/kafkasource over
// kafka-go, sources/franzsource over franz-go) share, so that they behave alike
// and a deployment can switch clients without reprocessing: the offset
// tracker, the record fingerprint and ID, the dead-letter records, the
// dispatch of records to the consumer and the metrics. What users name
// (options, errors, hooks) is package kafkagroup. It imports no Kafka client.
package kafkacore
