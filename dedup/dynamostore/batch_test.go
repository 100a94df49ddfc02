package dynamostore_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/batch"
	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/storetest"
	"github.com/onceq/onceq/internal/testsupport/faultproxy"
	"github.com/onceq/onceq/internal/testsupport/testenv"
	"github.com/onceq/onceq/retry"
)

// inserts are the batch cases' business writes: items of a table of ids,
// each Put conditioned on its id being absent.
func inserts(t *testing.T, c *ddb.Client) func(*testing.T, dedup.Store) storetest.Inserts {
	table := uniqueName("onceq_ids_")
	_, err := c.CreateTable(t.Context(), &ddb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	if err != nil {
		t.Fatalf("create the ids table: %v", err)
	}
	key := func(id string) map[string]types.AttributeValue {
		return map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}}
	}
	return func(*testing.T, dedup.Store) storetest.Inserts {
		return storetest.Inserts{
			Insert: func(id string) dedup.Write {
				return dynamostore.Write{Put: &types.Put{TableName: aws.String(table), Item: key(id),
					ConditionExpression: aws.String("attribute_not_exists(id)")}}
			},
			Inserted: func(t *testing.T, id string) bool {
				out, err := c.GetItem(t.Context(), &ddb.GetItemInput{TableName: aws.String(table), Key: key(id), ConsistentRead: aws.Bool(true)})
				if err != nil {
					t.Fatalf("reading the ids table: %v", err)
				}
				return len(out.Item) > 0
			},
		}
	}
}

// batchCommit is a Commit of the records [from, from+n) with writes and
// keys, at at(1).
func batchCommit(l batch.Lease, from int64, n int, writes []dedup.Write, keys []string) batch.Commit {
	at := clock()
	return batch.Commit{Lease: l, From: from, Next: from + int64(n), Writes: writes, Keys: keys, Now: at(1), ExpiresAt: at(3600)}
}

// Batches of 100 records cost one TransactWriteItems each: 0.01 store
// writes per message (the acquire included, 0.011 over ten batches),
// with a write per record but one in the transaction's 100 items.
func TestBatchWritesPerMessage(t *testing.T) {
	st, client, calls := countedStore(t)
	ins := inserts(t, client)(t, st)
	bs := st.Offsets()
	_, l := acquired(t, bs, 0)
	const batches, size = 10, 100
	for b := range batches {
		ws := make([]dedup.Write, size-1)
		for i := range ws {
			ws[i] = ins.Insert(uniqueName("id"))
		}
		if err := bs.Commit(t.Context(), batchCommit(l, int64(b*size), size, ws, nil)); err != nil {
			t.Fatalf("batch %d: %v", b, err)
		}
	}
	if n := calls.get("TransactWriteItems"); n != batches {
		t.Fatalf("%d TransactWriteItems for %d batches, want one each", n, batches)
	}
	if perMessage := float64(calls.total()) / (batches * size); perMessage > 0.05 {
		t.Fatalf("%d calls for %d messages: %.3f per message, want at most 0.05", calls.total(), batches*size, perMessage)
	}
}

// A commit whose answer was lost after DynamoDB committed it is retried,
// finds the offset row where it moves it, and reports success; its write
// applied once.
func TestBatchCommitRetriedAfterLostAnswer(t *testing.T) {
	rig := newFaultRig(t, fastPolicy(5))
	ins := inserts(t, dynamoClient(t, testenv.DynamoDBEndpoint(t), nil))(t, nil)
	bs := rig.st.Offsets()
	p, l := acquired(t, bs, 1)
	rig.proxy.AddRule(faultproxy.Rule{Op: "TransactWriteItems", Nth: 1, Fault: faultproxy.InternalError, After: true})
	id, k := uniqueName("id"), uniqueKey(t)
	if err := bs.Commit(t.Context(), batchCommit(l, 0, 5, []dedup.Write{ins.Insert(id)}, []string{k})); err != nil {
		t.Fatalf("commit whose answer was lost: %v, want success", err)
	}
	if n := rig.proxy.Requests("TransactWriteItems"); n != 2 {
		t.Fatalf("%d TransactWriteItems, want 2 (lost + recognised)", n)
	}
	if got, err := bs.Offset(t.Context(), p); err != nil || got.Next != 5 || got.Token != l.Token {
		t.Fatalf("row after the retried commit: %+v %v, want next 5 under token %d", got, err, l.Token)
	}
	if !ins.Inserted(t, id) {
		t.Fatal("the write of the commit whose answer was lost is not stored")
	}
	if r, err := rig.direct.Get(t.Context(), k); err != nil || r.Status != dedup.StatusCompleted {
		t.Fatalf("key of the commit whose answer was lost: %+v %v", r, err)
	}
}

// A key that is live and a write whose condition fails in one commit:
// the keys are named first, as every Store names them.
func TestBatchDuplicateKeysBeforeWriteCondition(t *testing.T) {
	st, client, _ := countedStore(t)
	ins := inserts(t, client)(t, st)
	bs := st.Offsets()
	_, l := acquired(t, bs, 2)
	id, k := uniqueName("id"), uniqueKey(t)
	if err := bs.Commit(t.Context(), batchCommit(l, 0, 1, []dedup.Write{ins.Insert(id)}, []string{k})); err != nil {
		t.Fatal(err)
	}
	err := bs.Commit(t.Context(), batchCommit(l, 1, 2, []dedup.Write{ins.Insert(id)}, []string{uniqueKey(t), k}))
	var de *batch.DuplicateKeysError
	if !errors.As(err, &de) || !slices.Equal(de.Indexes, []int{1}) {
		t.Fatalf("commit with a live key and a failing write: %v, want a *batch.DuplicateKeysError for [1]", err)
	}
}

// Over regional clients a commit's Keys are refused (each key is decided
// in its own home region); offsets alone commit.
func TestBatchRegionalClientsRefuseKeys(t *testing.T) {
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, c)
	st := newStore(t, nil, table, dynamostore.WithRegionalClients([]*ddb.Client{c, c}))
	bs := st.Offsets()
	_, l := acquired(t, bs, 0)
	if err := bs.Commit(t.Context(), batchCommit(l, 0, 1, nil, []string{uniqueKey(t)})); !errors.Is(err, dynamostore.ErrInvalidConfig) {
		t.Fatalf("commit with keys over regional clients: %v, want ErrInvalidConfig", err)
	}
	if err := bs.Commit(t.Context(), batchCommit(l, 0, 1, nil, nil)); err != nil {
		t.Fatalf("commit without keys over regional clients: %v", err)
	}
}

// A records table whose offsets table is missing: batch calls fail as
// misconfigured, naming the offsets table.
func TestBatchMissingOffsetsTable(t *testing.T) {
	c := dynamoClient(t, testenv.DynamoDBEndpoint(t), nil)
	table := recordsTable(t, c)
	if _, err := c.DeleteTable(t.Context(), &ddb.DeleteTableInput{TableName: aws.String(dynamostore.OffsetsTable(table))}); err != nil {
		t.Fatal(err)
	}
	_, err := newStore(t, c, table).Offsets().Acquire(t.Context(), batch.Partition{Group: "g", Topic: "t"}, "m")
	var tnf *dynamostore.TableNotFoundError
	if !errors.As(err, &tnf) || tnf.Table != dynamostore.OffsetsTable(table) || retry.Classify(err) != retry.Misconfigured {
		t.Fatalf("Acquire without the offsets table: %v (%v), want a *TableNotFoundError for %s, Misconfigured",
			err, retry.Classify(err), dynamostore.OffsetsTable(table))
	}
}

// acquired is a fresh partition of topic orders, acquired over bs by
// member "m".
func acquired(t *testing.T, bs batch.Store, partition int32) (batch.Partition, batch.Lease) {
	t.Helper()
	p := batch.Partition{Group: uniqueName("g"), Topic: "orders", Partition: partition}
	l, err := bs.Acquire(t.Context(), p, "m")
	if err != nil {
		t.Fatalf("Acquire %s: %v", p, err)
	}
	return p, l
}
