package dedup

// WriteKind names the Stores a business write is for: the package that
// declares the write type ("memstore", "pgstore", "dynamostore"). A Store
// declares the one kind it commits in Capabilities.Writes.
type WriteKind string

// Write is a business write, committed with a COMPLETED record in one
// atomic commit. Each Store declares its own write types (memstore.Write;
// pgstore.Exec and pgstore.Func; dynamostore.Write), which implement Write
// by naming their kind. Every path that carries writes — the per-message
// consumer's Result.Writes, batch mode's handler, an idempotent function's
// Tx.Write, and the Store's CompleteRequest and ClaimCompleteRequest —
// takes []Write, so a value that is no
// write at all (a bare SQL string, an SDK struct not converted to the
// Store's type) is a compile error. A write of another Store's kind is
// refused by a Guard before the Store is called, by comparing its kind
// with the Store's, as a *consumer.WriteTypeError.
type Write interface {
	// WriteKind names the Stores that commit the write: those whose
	// Capabilities.Writes is the same kind.
	WriteKind() WriteKind
}
