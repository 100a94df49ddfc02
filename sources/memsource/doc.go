// Package memsource is an in-process queue and [broker.Source], with the
// behaviour of a broker that matters to onceq: a visibility timeout that
// redelivers what is not settled, nack with delay, delivery counting, a
// dead-letter list and, optionally, FIFO groups. It backs the embedded demo
// and fast tests and passes sources/sourcetest like the real adapters.
//
// Its [Source.Capabilities] are the queue's: its visibility timeout as the
// delivery timeout (the consumer extends deliveries it holds), its
// [Ordering], and a dead-letter destination, which always exists. No
// redelivery window is declared: the queue forgets what was acked.
// [Source.Check] always succeeds.
//
// [Sender] sends an outbox's entries to queues of this package.
//
// It imports packages broker and outbox only; anything may import it.
package memsource
