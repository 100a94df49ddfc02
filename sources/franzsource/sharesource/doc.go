// Package sharesource is a [broker.Source] over a Kafka share group
// (KIP-932, Kafka 4.x "queues for Kafka"), on franz-go's kgo client. Many
// members read one partition; each record is acquired under a time-limited
// lock and acknowledged one by one. A share group is at least once: a
// member that dies after its effect and before its acknowledgement makes
// the record run again. The consumer's dedup store supplies the missing
// half: the store decides what ran, the share group decides who gets what.
//
// The mapping of broker.Source onto a share group:
//
//   - Ack accepts the record, after its COMPLETED commit, as with every
//     source. Acknowledgements go to the broker within a second, batched;
//     Close sends what is pending.
//   - Nack releases the record: it is delivered again, to any member, with
//     its delivery count one higher. A share group has no per-record
//     delay, so a retry delay is kept by the source, which holds the
//     record (renewing its lock) until the delay ends and releases it then.
//   - DeadLetter produces the record to the [DeadLetterTopic] with the
//     kafkagroup reason and origin headers, then accepts it. Without a
//     dead-letter topic it rejects the record, which the broker archives:
//     it stays in the topic's log and the store keeps its DEAD_LETTER
//     outcome; it is never silently dropped.
//   - Extend renews the acquisition lock (franz-go's AckRenew; Kafka 4.2
//     and later). The source declares half the lock duration as its
//     Capabilities.DeliveryTimeout, so the consumer renews each held record
//     every quarter lock while its handler runs.
//   - The broker's delivery count is the message's Deliveries. With
//     [CheckAttempts], New refuses a group whose delivery-count limit would
//     archive a record the consumer would still retry.
//   - Records have no partition owner and no order across members: the
//     source declares broker.Unordered, and the consumer's per-key ordering
//     is not available on a share group.
//
// franz-go accepts, at a client's next poll, every record of its previous
// poll not yet acknowledged (renewed ones too). A source that polled while
// handlers still ran would accept records before their COMPLETED commit,
// and lose them in a crash. So each member (a franz-go client; [Members]
// of them, default 4) polls again only once every record of its last poll
// is settled: a slow handler holds back its own member, and the others
// keep records coming. A polled record whose lock has less than half its
// duration left (prefetched) is released, not delivered; the source renews
// the locks of the records waiting for the consumer, so that none goes back
// to the group, its delivery count one higher, for want of a handler.
//
// Every release counts against the group's delivery-count limit, a kill's
// included (a dead member's records are released): give the limit room
// above what CheckAttempts asks, or the broker archives a record onceq
// would still run.
//
// The broker ties a share session to a connection and releases the
// records a member holds when that connection closes: a member that dies
// gives its records back at once; one that hangs gives them back when
// their locks run out. A record that went to another member while this
// one still held it is fenced by the store's lease, never run twice.
//
// The group's settings live on the broker: share.auto.offset.reset (a new
// group starts at the end of its topics unless it is earliest; see
// [FromEarliest]), the record lock duration, the delivery-count limit and
// the share session timeout. New reads the lock duration and the
// delivery-count limit.
package sharesource
