package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/onceq/onceq/dedup"
)

var _ dedup.Forgetter = (*Store)(nil)

// Forget implements dedup.Forgetter: one DeleteItem conditioned on the
// version, which returns the item it kept when the condition fails.
func (s *Store) Forget(ctx context.Context, key string, version int64) error {
	const op = "Forget"
	k, err := s.layout.key(key)
	if err != nil {
		return err
	}
	in := &ddb.DeleteItemInput{
		TableName:                           aws.String(s.table),
		Key:                                 k,
		ConditionExpression:                 aws.String("#v = :v"),
		ExpressionAttributeNames:            map[string]string{"#v": attrVersion},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":v": &types.AttributeValueMemberN{Value: strconv.FormatInt(version, 10)}},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	client := s.client(key)
	err = s.do(ctx, op, func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.DeleteItem(ctx, in)
		return metadata(o), err
	})
	var ccf *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case !errors.As(err, &ccf):
		return s.wrap("forget", key, s.refused(ctx, op, key, in, err))
	case len(ccf.Item) == 0:
		return fmt.Errorf("dynamostore: forget key_hash %s: %w", dedup.KeyHash(key), dedup.ErrNotFound)
	}
	was, _ := getN(ccf.Item, attrVersion, false, 0, 1<<62)
	return fmt.Errorf("dynamostore: forget key_hash %s: %w: version %d, not %d", dedup.KeyHash(key), dedup.ErrRecordChanged, was, version)
}
