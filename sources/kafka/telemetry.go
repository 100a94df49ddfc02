package kafka

const instrumentationName = "github.com/onceq/onceq/sources/kafka"
