package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/outbox"
)

var _ dedup.Inspector = (*Store)(nil)

// List implements dedup.Inspector. By tenant it is TenantRecords (a
// Query of the tenant's partition keys, which needs TenantLayout or
// NamespaceLayout: else an error wrapping dedup.ErrCannotList); otherwise
// it Scans the table, filtering on the server, until f.Limit records
// match: read capacity for every item read, not only those listed.
// Hooks and metrics see its calls as operation "List".
func (s *Store) List(ctx context.Context, f dedup.ListFilter) ([]dedup.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, fmt.Errorf("dynamostore: %w: %w", ErrInvalidConfig, err)
	}
	if f.Tenant != "" {
		recs, err := s.tenantRecords(ctx, f.Tenant, f.Status, f.Since, f.Limit)
		if errors.Is(err, ErrNotTenantLayout) {
			err = fmt.Errorf("%w of table %s: %w", dedup.ErrCannotList, s.table, err)
		}
		return recs, err
	}
	var filters []string
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	if f.Status != "" {
		filters = append(filters, "#status = :status")
		names["#status"], values[":status"] = attrStatus, str(string(f.Status))
	}
	if !f.Since.IsZero() {
		filters = append(filters, "#created >= :since")
		names["#created"], values[":since"] = attrCreated, num(floorUnix(f.Since))
	}
	in := &ddb.ScanInput{TableName: s.tableName, ConsistentRead: aws.Bool(true)}
	if len(filters) > 0 {
		in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = names, values
	}
	var recs []dedup.Record
	for {
		var out *ddb.ScanOutput
		err := s.do(ctx, "List", func(ctx context.Context, _ int) (middleware.Metadata, error) {
			o, err := s.clients[0].Scan(ctx, in)
			out = o
			if o == nil {
				return middleware.Metadata{}, err
			}
			return o.ResultMetadata, err
		})
		if err != nil {
			return nil, fmt.Errorf("dynamostore: scan table %s: %w", s.table, err)
		}
		for _, it := range out.Items {
			r, err := decodeRecord(it)
			if err != nil {
				continue // not a record (a foreign item): not listed
			}
			if recs = append(recs, r); len(recs) == f.Limit {
				return recs, nil
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return recs, nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// OutboxEntries implements dedup.Inspector: Outbox().Entries.
func (s *Store) OutboxEntries(ctx context.Context, state outbox.State, limit int) ([]outbox.Entry, error) {
	return s.outbox.Entries(ctx, state, limit)
}
