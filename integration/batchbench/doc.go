// Package batchbench measures Kafka batch mode against what it replaces:
// a raw consumer applying the same inserts with no exactly-once, and
// per-message mode, on the same broker, store and records in one run;
// and the store writes batch mode spends per message.
package batchbench
