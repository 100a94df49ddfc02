// Package sharebench holds the share-group benchmarks of `make bench`:
// onceq's share-group source (sources/franzsource/sharesource) on
// PostgreSQL beside a hand-written franz-go share consumer making the same
// claim and complete statements, and over the memory store beside a raw
// share consumer that accepts every record, on the in-process kfake broker.
package sharebench
