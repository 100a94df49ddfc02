package kafkasource

const instrumentationName = "github.com/onceq/onceq/sources/kafkasource"
