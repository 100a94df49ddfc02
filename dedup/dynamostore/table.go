package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/retry"
)

// CreateTable makes a records table: on-demand billing, the key schema of
// the layout (pk; or pk + sk with TenantLayout) and TTL on expires_at.
// It is idempotent: an existing table is accepted when its key schema
// matches, and TTL is enabled if it is not. Beside it, it makes the
// offsets table of batch mode (OffsetsTable; see Offsets), and with
// WithOutbox the outbox table too. It returns once the tables are ACTIVE.
func CreateTable(ctx context.Context, client *ddb.Client, table string, opts ...TableOption) error {
	cfg := tableConfig{waitTimeout: 5 * time.Minute}
	for _, o := range opts {
		if o != nil {
			o.applyTable(&cfg)
		}
	}
	attrs := []types.AttributeDefinition{{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS}}
	schema := []types.KeySchemaElement{{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash}}
	if cfg.tenant {
		attrs = append(attrs, types.AttributeDefinition{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS})
		schema = append(schema, types.KeySchemaElement{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange})
	}
	var stream *types.StreamSpecification
	if cfg.stream {
		stream = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}
	}
	_, err := client.CreateTable(ctx, &ddb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: attrs,
		KeySchema:            schema,
		BillingMode:          types.BillingModePayPerRequest,
		StreamSpecification:  stream,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", table, err)
	}
	waiter := ddb.NewTableExistsWaiter(client, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	desc, err := waiter.WaitForOutput(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)}, cfg.waitTimeout)
	if err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", table, err)
	}
	if err := checkSchema(desc.Table, cfg.tenant); err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", table, err)
	}
	if stream != nil {
		if err := ensureStream(ctx, client, table, desc.Table, cfg.waitTimeout); err != nil {
			return err
		}
	}
	if err := createOffsetsTable(ctx, client, table, cfg.waitTimeout); err != nil {
		return err
	}
	if err := ensureTTL(ctx, client, table); err != nil {
		return err
	}
	if cfg.outbox {
		return CreateOutboxTable(ctx, client, table, TableWaitTimeout(cfg.waitTimeout))
	}
	return nil
}

// ensureStream enables an existing table's stream with both images, or
// accepts one that has them (an Auditor needs the old image).
func ensureStream(ctx context.Context, client *ddb.Client, table string, t *types.TableDescription, wait time.Duration) error {
	if sp := t.StreamSpecification; sp != nil && aws.ToBool(sp.StreamEnabled) {
		if sp.StreamViewType != types.StreamViewTypeNewAndOldImages {
			return fmt.Errorf("dynamostore: table %s has a %s stream, want NEW_AND_OLD_IMAGES", table, sp.StreamViewType)
		}
		return nil
	}
	_, err := client.UpdateTable(ctx, &ddb.UpdateTableInput{
		TableName:           aws.String(table),
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: enable the stream of table %s: %w", table, err)
	}
	waiter := ddb.NewTableExistsWaiter(client, func(o *ddb.TableExistsWaiterOptions) {
		o.MinDelay = 500 * time.Millisecond
		o.MaxDelay = 5 * time.Second
	})
	if err := waiter.Wait(ctx, &ddb.DescribeTableInput{TableName: aws.String(table)}, wait); err != nil {
		return fmt.Errorf("dynamostore: wait for table %s: %w", table, err)
	}
	return nil
}

// Check implements dedup.Store: on every regional client (a Global
// Table's regions, WithRegionalClients), the table exists, is ACTIVE (or
// being updated), has the key schema of the store's layout, and can be
// read and written; so can the archive (WithArchive). A table without TTL
// on expires_at works (expired records are still treated as absent) but
// grows without end: Check logs a warning.
func (s *Store) Check(ctx context.Context) error {
	for i, client := range s.clients {
		where := ""
		if len(s.clients) > 1 {
			// Which region failed is what the operator needs.
			where = fmt.Sprintf(" (regional client %d, region %s)", i, client.Options().Region)
		}
		if err := s.checkClient(ctx, client); err != nil {
			if where == "" {
				return err
			}
			return fmt.Errorf("%w%s", err, where)
		}
	}
	return nil
}

func (s *Store) checkClient(ctx context.Context, client *ddb.Client) error {
	// Through the retry policy, like every store call: a throttle or a
	// reset at start-up is an outage, not a wrong deployment.
	var desc *ddb.DescribeTableOutput
	err := s.do(ctx, "DescribeTable", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		desc, err = client.DescribeTable(ctx, &ddb.DescribeTableInput{TableName: aws.String(s.table)})
		return metadata(desc), err
	})
	if err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", s.table, missingTable(s.table, err))
	}
	if err := checkSchema(desc.Table, s.layout.tenant); err != nil {
		return fmt.Errorf("dynamostore: table %s: %w", s.table, &LayoutError{Err: err})
	}
	switch st := desc.Table.TableStatus; st {
	case types.TableStatusActive, types.TableStatusUpdating:
	default:
		return fmt.Errorf("dynamostore: table %s is %s, not ACTIVE", s.table, st)
	}
	var ttl *ddb.DescribeTimeToLiveOutput
	err = s.do(ctx, "DescribeTimeToLive", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		var err error
		ttl, err = client.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: aws.String(s.table)})
		return metadata(ttl), err
	})
	if err != nil {
		return fmt.Errorf("dynamostore: TTL of table %s: %w", s.table, err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling ||
		aws.ToString(d.AttributeName) != attrExpires {
		s.log.WarnContext(ctx, "dynamostore: TTL is not enabled on expires_at: expired records are never deleted and the table grows",
			"table", s.table)
	}
	// A read, and a write whose condition never holds, prove the
	// permissions every claim needs (GetItem for Get; PutItem, the claim
	// of a new key), writing nothing.
	probe, err := s.layout.key("onceq-check#" + s.table)
	if err != nil {
		return err
	}
	if err := s.probeRead(ctx, client, s.tableName, probe); err != nil {
		return fmt.Errorf("dynamostore: reading table %s: %w", s.table, err)
	}
	if err := s.probeWrite(ctx, client, probe); err != nil {
		return fmt.Errorf("dynamostore: writing table %s: %w", s.table, err)
	}
	if s.archive != nil {
		if err := s.probeRead(ctx, client, s.archive, probe); err != nil {
			return fmt.Errorf("dynamostore: reading archive table %s: %w", *s.archive, err)
		}
	}
	return nil
}

// probeRead reads item from table with client, as Get and the archive
// check do.
func (s *Store) probeRead(ctx context.Context, client *ddb.Client, table *string, item map[string]types.AttributeValue) error {
	in := &ddb.GetItemInput{TableName: table, Key: item, ConsistentRead: aws.Bool(true)}
	return s.do(ctx, "GetItem", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.GetItem(ctx, in)
		return metadata(o), err
	})
}

// probeWrite sends a PutItem of item whose condition is always false: the
// ConditionalCheckFailedException it earns proves the permission to put,
// and nothing is written. A failed conditional write still costs one write
// unit, once per Check.
func (s *Store) probeWrite(ctx context.Context, client *ddb.Client, item map[string]types.AttributeValue) error {
	in := &ddb.PutItemInput{
		TableName:                s.tableName,
		Item:                     item,
		ConditionExpression:      aws.String("attribute_exists(#pk) AND attribute_not_exists(#pk)"),
		ExpressionAttributeNames: map[string]string{"#pk": attrPK},
	}
	err := s.do(ctx, "PutItem", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.PutItem(ctx, in)
		return metadata(o), err
	})
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return nil
	}
	return err // nil only if the impossible condition held
}

// LayoutError says the table's key schema is not the one the store's
// layout needs (a tenant-layout table opened without TenantLayout, or
// the reverse). It is a configuration fault.
type LayoutError struct{ Err error }

func (e *LayoutError) Error() string { return e.Err.Error() }
func (e *LayoutError) Unwrap() error { return e.Err }

// RetryClass implements retry.Classifier: a wrong layout is misconfigured.
func (e *LayoutError) RetryClass() retry.Class { return retry.Misconfigured }

// ensureTTL enables TTL on expires_at unless it already is: a second
// UpdateTimeToLive is a ValidationException, not a no-op.
func ensureTTL(ctx context.Context, client *ddb.Client, table string) error {
	d, err := client.DescribeTimeToLive(ctx, &ddb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamostore: describe TTL of %s: %w", table, err)
	}
	if ttl := d.TimeToLiveDescription; ttl != nil {
		switch ttl.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if name := aws.ToString(ttl.AttributeName); name != attrExpires {
				return fmt.Errorf("dynamostore: table %s has TTL on %q, want %q", table, name, attrExpires)
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &ddb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrExpires),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("dynamostore: enable TTL on %s: %w", table, err)
	}
	return nil
}
