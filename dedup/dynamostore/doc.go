// Package dynamostore is a dedup.Store over Amazon DynamoDB (aws-sdk-go-v2).
//
// # Record layout
//
// One item per key. Default layout: partition key pk = the whole key
// ("<namespace>#<fingerprint>"). Tenant layout (TenantLayout): pk = the
// message's tenant (the key up to its first '#', which dedup.TenantKey
// puts there; "<tenant>#<n>" with TenantShards) and sort key sk = the
// rest, so one tenant's records can be queried (TenantRecords).
// NamespaceLayout splits keys the same way, without a tenant: pk is then
// the static namespace, one hot partition.
//
// # Audit trail
//
// An Auditor (package dynamostore/audit) reads the table's stream
// (WithStream): tombstones of COMPLETED records TTL removed go to an
// archive table, which claims consult with WithArchive; it reports TTL lag
// and keys completed by two owners.
// Other attributes: status, version, owner, payload_hash, attempts,
// created_at, expires_at (the table's TTL attribute), lease_expires_at,
// response (binary), error and takeovers.
//
// Key attributes hold UTF-8 strings of at most 2048 bytes (pk) and 1024
// (sk): a fingerprint too long for its attribute, or not UTF-8, is stored
// as "sha256:" and the hex of its SHA-256, deterministically. A tenant too
// long for pk is a *dedup.KeyTooLongError (Permanent). Record.Key read back
// is the stored form.
//
// # Claim
//
// A claim is taken when the key is absent or expired:
//
//	attribute_not_exists(pk) OR expires_at < :now
//
// Nearly every key a claim meets is absent, so a claim is first ONE
// PutItem of the whole record at version 1, no failed run, conditioned on
// attribute_not_exists(pk) alone, with
// ReturnValuesOnConditionCheckFailure=ALL_OLD: a loser learns the live
// record from the exception itself (Claim.Existing, no GetItem). Only when
// the record the Put met is expired (a takeover) does the claim send a
// second call, ONE UpdateItem conditioned on the whole "absent or expired"
// condition and on the version the Put saw, which keeps the version
// counting across takeovers (if_not_exists(version, 0) + 1), so a version
// is never reused while the item exists, keeps the failed runs the record
// counted (none past a COMPLETED record's retention), and returns the
// record it took over (ReturnValues=ALL_OLD: Claim.Previous). A record
// that moved on between the two is looked at again, a few times at most. Whether the record met is live is read from the Put's
// answer by the same condition, skew margin arms included; a record the
// store cannot read that way is left to the Update's condition. A new key
// or a duplicate therefore costs one call, a takeover two (the Put's
// condition failure is counted as a call and a ConditionalCheckFailed
// like any other). TTL may delete an item and restart versions at 1,
// which is why every fence checks the owner token as well as the version.
//
// Each attribute, and what it is for: status (PENDING, COMPLETED or
// FAILED: what a duplicate is told, and what fences check); version (the
// fence against a stale holder, counting on across takeovers); owner (the
// claim's token: the fence, and how a retry knows its own committed
// write); payload_hash (key reuse with another payload is told from a
// duplicate); attempts (the failed handler runs: Fail adds one unless it
// refunds, a claim adds none; Claim.Attempt is it plus one, for
// poison-message limits); created_at (Record.CreatedAt, for operators);
// expires_at (the lease, retry delay or retention end, the claim
// condition's clock and the table's TTL); lease_expires_at (a PENDING
// record's lease, so that one without an expiry is refused as corrupt);
// response (a COMPLETED record's answer for duplicates); error (a FAILED
// record's reason); takeovers (the takeovers of an abandoned lease, apart
// from attempts: a claim over an expired PENDING record adds one, written
// only once there is one, absent is none; Claim.Takeovers, for crash-loop
// limits). A one-round-trip claim writes no lease_expires_at and
// no error, and a response only when there is one; it keeps the others,
// which a duplicate reads or a later takeover counts on from.
//
// # Fencing
//
// Complete, Fail and Extend are UpdateItems conditioned on
// owner = :owner AND version = :v AND status = PENDING. A condition failure is
// dedup.ErrLeaseLost (a *LeaseLostError carrying the current record). Complete
// and Fail bump the version; Extend keeps it, so the caller's Lease stays
// valid after a heartbeat.
//
// # Times
//
// Times are stored in epoch seconds, because DynamoDB TTL reads seconds.
// Every expiry written (lease, retention, retry delay) is rounded UP to the
// next second and the caller's Now is rounded DOWN, so a record is never
// treated as expired before the time the caller asked for: a lease can last
// up to a second longer than requested, never shorter. A record is live
// through its expiry second (dedup.Record.Live) and claimable once
// expires_at < floor(now). For a PENDING record a request's SkewMargin is
// subtracted from now, so an expired lease becomes claimable that much later
// (protection against a claimer whose clock runs ahead of the holder's);
// meanwhile a loser may be shown a lease whose ExpiresAt has passed. A
// FAILED record's retry delay and a COMPLETED record's retention end on
// time: taking them a little early doubles nothing.
//
// A margin only protects if clocks really are that close, so the store
// measures its host's clock against DynamoDB's (the Date header of every
// response; gauge onceq.dynamodb.clock_offset), logs a warning when the
// offset passes half a request's margin, and refuses a claim whose Now is
// further than its margin from DynamoDB's time with a *ClockSkewError
// (retry.Misconfigured), before writing anything. WithoutClockCheck turns
// the refusal off, for callers that drive the store with a clock of their
// own.
//
// # Transactions
//
// CompleteRequest.Writes and ClaimCompleteRequest.Writes hold Write or
// *Write values (a types.TransactWriteItem converted:
// dynamostore.Write(item), or written as dynamostore.Write{Put: ...});
// any other type is dedup.ErrUnsupportedWrite. They are committed in ONE TransactWriteItems
// with the record's transition (the record is item 0, Writes[i] is item i+1),
// at most 100 items in all (*dedup.TooManyWritesError before sending).
// ClaimComplete's record item is a Put for an absent key and, once that
// transaction is cancelled on an expired record (it applied none of its
// writes), the claim's Update in a second transaction with the same writes.
// Cancellation reasons are read by index: the record's ConditionalCheckFailed
// is a lost lease (Complete) or a live record (ClaimComplete); a write's
// ConditionalCheckFailed is a *dedup.BusinessConditionError with Index i;
// TransactionConflict and throttling are retried; other reasons are
// permanent (*TransactionError). A cancellation that reports the record's
// ConditionalCheckFailed without the record (DynamoDB returns it on
// request, not always) is followed by a strongly consistent GetItem of it.
//
// # Batch mode
//
// The Store's Capabilities hand over its batch view
// (dedup.Capabilities.Offsets, batch.Store; Offsets returns it too).
// Each Kafka partition's offset row (group, topic, partition, fencing token, next offset) is an item of
// the offsets table, a table of its own beside the records table
// (OffsetsTable; CreateTable makes both), keyed by the group's length,
// the group, the topic and the partition, so that the records table's
// TTL, stream, auditor and scans never meet one. A batch commits as one
// TransactWriteItems: the offset row's update, conditioned on the lease's
// token and on its next offset being From (or -1), then the business
// writes, then the batch's keys as COMPLETED records under a claim's
// condition (absent or expired): at most 100 items, else a
// *batch.TooLargeError before the call. The cancellation reasons are
// read by index: the offset row's gives batch.ErrFenced or
// batch.ErrOffsetMismatch, from the row it returns; then every key whose
// record is live, a *batch.DuplicateKeysError; then a write's, a
// *dedup.BusinessConditionError. A batch of 100 records is one write
// call: 0.01 per message.
//
// # Refused requests
//
// Every request the store builds is one DynamoDB accepts, whatever record
// it meets, one lacking any attribute included. Should DynamoDB still
// refuse one as invalid (ValidationException, other than an item too
// large), the fault is the store's or the deployment's (a table of the
// other layout), never the message's: the error is a *RequestRefusedError
// (retry.Misconfigured) carrying the request's expressions and attribute
// names, and the store logs them at ERROR with the key's hash. A refused
// transaction with business writes keeps the Permanent class, since one of
// the writes may be what DynamoDB refused.
//
// # Retries
//
// New takes its own copy of the client given (the caller's is unchanged).
// Every store call runs with the SDK's retryer disabled (aws.NopRetryer, one
// HTTP attempt) and is retried by the store's retry.Policy instead, through
// the instruments every store has (package storeinstr), which back off
// throttles and transient faults with jitter and report each retry to
// every storeinstr.HookStoreRetry with its class and DynamoDB error code,
// to the metrics onceq.store.retries and onceq.store.errors, and to the
// observer of every Consumer over the store (Attach), which slows down on
// throttles. Two layers
// retrying would multiply attempts and hide throttles inside the SDK, where
// no counter sees them. A ConditionalCheckFailed is a decision and is never
// retried. When a retry follows a fault after which the first attempt may
// have committed (a 5xx, a reset connection), the store recognises its own
// write by the owner token in the returned record and reports success, so a
// lost response neither loses a completion nor applies business writes twice.
// Owner tokens must therefore be unique per claim.
//
// # Global Tables
//
// Conditional writes are linearizable only within one region: two workers
// claiming the same key in two regions of a Global Table can both succeed,
// and last-writer-wins replication then silently drops one claim, so the
// message is processed twice. WithRegionalClients gives the store one client
// per region and routes every call for a key to the client picked by a
// stable FNV-1a hash of the key (its home region), so all claims, fences and
// reads of one key are decided in one region. Every worker must list the
// same clients in the same order.
//
// # Size
//
// A record with its response larger than DynamoDB's 400 KB item limit is
// refused before sending with a *dedup.RecordTooLargeError (the item size is
// estimated by DynamoDB's rules: attribute names plus values).
//
// Limits: a response longer than MaxResponseSize (default
// dedup.DefaultMaxResponseSize, 256 KiB; at most 400 KB) is refused by Complete and
// ClaimComplete with a *dedup.ResponseTooLargeError, and a nil write with a
// *dedup.NilWriteError, before anything is written. Fail stores its reason
// as dedup.StorableReason makes it (valid UTF-8, at most 1,024 bytes).
//
// # Outbox
//
// CompleteRequest.Outbox and ClaimCompleteRequest.Outbox are Puts on the
// outbox table (OutboxTable: the records table's name with "_outbox";
// CreateTable with WithOutbox, or CreateOutboxTable, makes it) in the same
// TransactWriteItems as COMPLETED: the record, the business writes, one
// item per message and one per OrderingKey's lane (its counter, below)
// count against DynamoDB's 100 items, each entry against
// its 400 KB (with the entry's small copy in the lane_pending index and
// about 1.2 KB kept for the relay's marks: a body of up to about 398 KB
// fits) and the whole against its 4 MB, before the call
// (*dedup.TooManyWritesError, *OutboxTooLargeError; the message is
// dead-lettered). Store.Outbox gives the relay's view (an *Outbox): see
// its Lease for how lanes keep their order and relays are fenced. The
// pending index holds each entry's lease time, so that a relay passes
// over lanes it cannot send now (a destination that is down) without
// reading them; each take and retry writes that index too.
// A lane's entries are sent in the order they committed, whatever the
// committing workers' clocks say: the commit moves the lane's counter
// item on in its transaction, conditioned on a Seq above the lane's last,
// and commits again above it when another worker's clock ran ahead.
// Commits to one lane are so serialised on one item (DynamoDB takes
// about a thousand writes a second to an item; a transaction conflict is
// retried). Dispatched and Dead entries, and a lane's counter an hour
// after its last commit, expire by the table's TTL. The outbox table
// is read and written in the Store's first region (WithRegionalClients).
// An outbox table made by an earlier build differs in its indexes, and
// still works: its lane_pending index projects every attribute, so each
// entry counts twice against 400 KB and a message over about 200 KB fails
// as a record too large; its pending index holds keys only, so lanes held
// at the front of a shard (a destination that is down) may hide newer
// lanes from a relay. A local index cannot be changed: once no entry is
// Pending, delete the table and run CreateOutboxTable again.
//
// # Imports
//
// This package owns the DynamoDB SDK within onceq: no other package of the
// library imports it. It imports dedup, retry and onceq's internal
// packages; applications and the operator CLI import it.
package dynamostore
