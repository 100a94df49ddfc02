// Package franztxn processes Kafka to Kafka exactly once with no dedup
// store: the records a handler returns and the offsets it consumed commit
// in one Kafka transaction (franz-go's GroupTransactSession), so a
// read_committed reader downstream sees each input's outputs exactly once,
// whatever crashes, rebalances or zombie workers occur.
//
// It is a runner of its own, not a Source: a consumer.Consumer commits
// each message with a store, and here the transaction is the commit.
// Handlers are consumer.Handlers, so a handler written for a Consumer
// moves over as long as its effects are its outgoing messages:
//
//	h := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) (consumer.Result, error) {
//		return consumer.Result{Outbox: []outbox.Message{
//			{Destination: "orders.reserved", OrderingKey: m.OrderingKey, Body: reserve(m.Body)},
//		}}, nil
//	})
//	p, err := franztxn.New(ctx, seeds, "reserver", []string{"orders"}, podName, h)
//	if err != nil { /* a configuration error, or a topic missing */ }
//	err = p.Run(ctx)
//
// # What commits
//
// Run polls up to MaxPollRecords records, runs the handler over them
// (each partition's in offset order, up to Concurrency partitions at
// once) and produces each Result.Outbox message as a record: Destination
// is the topic, OrderingKey the record key (so the default partitioner
// keeps a key's order), Body the value, Headers the headers. Each record
// also carries, as its idempotency-key header, the stable ID
// outbox.ID(input key, index), where the input key is the input's
// idempotency-key header or else broker.Fingerprint: an onceq consumer
// downstream keys it by that ID and absorbs a copy that some other path
// sent twice. Then the outputs and the offsets past the polled records
// commit in one transaction, or neither does.
//
// A Result with Writes is refused (ErrWritesUnsupported): nothing here
// commits them. An output to a topic that does not exist is refused
// (ErrUnknownTopic) before it is produced, and one larger than its
// topic takes is refused by the topic (an *outbox.RefusedError). Each
// stops Run with a *RecordError naming the input, its transaction
// aborted. A Rejected
// Result sends nothing; Response is not kept (there is no store to cache
// it in).
//
// # Failures
//
//   - A handler's error aborts the transaction: no output of it is
//     visible to a read_committed reader, no offset moves, and the records
//     are polled and handled again after RetryBackoff. A permanent error
//     (consumer.Permanent), or a panic, stops Run with a *RecordError:
//     without a store there is nowhere to park the record, and skipping it
//     would lose it.
//   - A rebalance never lands inside a transaction: the client holds the
//     group's rebalance from a poll until the transaction has ended, so
//     RebalanceTimeout must exceed one transaction's time. A revoke
//     between transactions aborts nothing: the records polled after it
//     are set back and polled again before any is handled, rather than
//     handled and then thrown away by an abort. Only a transaction the
//     group overtook (this member dropped, its generation ended before
//     the commit) is aborted, and its records are read again by whoever
//     owns their partition.
//   - Records the client fetched past an aborted transaction are dropped
//     with it and fetched again from the committed offsets: none is
//     handled twice into the output, none skipped.
//   - A worker killed mid-transaction leaves its transaction open; the
//     broker aborts it when a worker starts under the same transactional
//     ID (which is why that ID must be stable per worker), or after
//     TransactionTimeout. Until then the partitions' committed offsets are
//     unstable and their next owner waits, rather than reading past them.
//   - A worker whose transactional ID was taken over while it stalled (a
//     zombie) commits nothing: the broker refuses its transaction, and Run
//     returns ErrFenced.
//
// # Observing
//
// The counter onceq.kafka.transactions (attributes onceq.result,
// committed or aborted, and messaging.consumer.group.name) counts the
// transactions ended. Hooks (WithHooks) see each transaction
// (HookKafkaTransaction), and partitions assigned (HookKafkaAssign) and
// revoked or lost (HookKafkaRevoke).
package franztxn
