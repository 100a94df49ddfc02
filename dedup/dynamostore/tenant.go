package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
)

// Capabilities implements dedup.Store: ClaimComplete always; TenantKeyed
// with TenantLayout, whose keys must carry the message's tenant; and the
// business writes of Kind (Write and its pointer); outgoing messages (the
// relay's view, Outbox, handed over); and batch mode's offset rows (the
// batch view, Offsets). The Store is its own Inspector.
func (s *Store) Capabilities() dedup.Capabilities {
	return dedup.Capabilities{ClaimComplete: true, TenantKeyed: s.tenantKeyed,
		Writes: Kind, Outbox: s.outbox, Offsets: s.Offsets(), Inspector: s, Resetter: s, Forgetter: s}
}

// Attach implements dedup.Store: the Store logs to rt.Logger unless
// WithLogger gave it one (the last non-nil one handed over, when several
// Guards share the Store), and tells every rt.Observe handed over of each
// throttle and transient fault it retries.
func (s *Store) Attach(rt dedup.Runtime) { s.instr.Attach(rt) }

// ErrNotTenantLayout: a per-tenant listing of a store without a tenant
// layout.
var ErrNotTenantLayout = errors.New("dynamostore: listing by tenant needs TenantLayout (or NamespaceLayout)")

// TenantRecords lists up to limit records of tenant created at or after
// since: one Query per partition key of the tenant (TenantShards of them),
// never a Scan. The sort key is the fingerprint, so DynamoDB reads the
// tenant's whole partition and filters on created_at: the cost is read
// units for every record of the tenant read, not only those listed. With
// NamespaceLayout, tenant is the namespace.
func (s *Store) TenantRecords(ctx context.Context, tenant string, since time.Time, limit int) ([]dedup.Record, error) {
	return s.tenantRecords(ctx, tenant, "", since, limit)
}

// tenantRecords is TenantRecords of the records with status ("": any).
func (s *Store) tenantRecords(ctx context.Context, tenant string, status dedup.Status, since time.Time, limit int) ([]dedup.Record, error) {
	const op = "Query"
	if !s.layout.tenant {
		return nil, ErrNotTenantLayout
	}
	if limit <= 0 {
		return nil, fmt.Errorf("dynamostore: TenantRecords: limit %d must be positive", limit)
	}
	first := tenant
	if s.tenantKeyed {
		var err error
		if first, err = dedup.EscapeTenant(tenant); err != nil {
			return nil, err
		}
	}
	// The partition key as a claim makes it, without a shard.
	item, err := layout{tenant: true}.key(first + "#x")
	if err != nil {
		return nil, err
	}
	base := item[attrPK].(*types.AttributeValueMemberS).Value
	pks := []string{base}
	if s.layout.shards > 1 {
		pks = pks[:0]
		for i := range s.layout.shards {
			pks = append(pks, base+"#"+strconv.Itoa(i))
		}
	}
	var recs []dedup.Record
	for _, pk := range pks {
		in := &ddb.QueryInput{
			TableName:                 s.tableName,
			KeyConditionExpression:    aws.String("#pk = :pk"),
			FilterExpression:          aws.String("#created >= :since"),
			ExpressionAttributeNames:  map[string]string{"#pk": attrPK, "#created": attrCreated},
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": str(pk), ":since": num(floorUnix(since))},
		}
		if status != "" {
			in.FilterExpression = aws.String("#created >= :since AND #status = :status")
			in.ExpressionAttributeNames["#status"] = attrStatus
			in.ExpressionAttributeValues[":status"] = str(string(status))
		}
		for {
			var out *ddb.QueryOutput
			err := s.do(ctx, op, func(ctx context.Context, _ int) (middleware.Metadata, error) {
				var err error
				out, err = s.clients[0].Query(ctx, in)
				if out != nil {
					return out.ResultMetadata, err
				}
				return middleware.Metadata{}, err
			})
			if err != nil {
				return nil, fmt.Errorf("dynamostore: query table %s by tenant: %w", s.table, err)
			}
			for _, it := range out.Items {
				r, err := decodeRecord(it)
				if err != nil {
					continue // not a record (a foreign item): not listed
				}
				if recs = append(recs, r); len(recs) == limit {
					return recs, nil
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
	return recs, nil
}
