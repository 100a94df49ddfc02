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
)

// ErrBadKeyHash: a key hash that is not the 12 lowercase hex digits
// dedup.KeyHash returns.
var ErrBadKeyHash = errors.New("dynamostore: a key hash is 12 hex digits (dedup.KeyHash)")

// KeyHashSearch is what FindKeyHash found and what it cost: Scanned
// counts the items read (Unit says "items"), Exhausted whether the whole
// table was, Metered that reads are billed, ReadUnits the read capacity consumed (as
// DynamoDB reported it), and Unmatchable the items read whose fingerprint
// (or tenant) is stored as its SHA-256 (HashedKeys; "sha256:" form: too long for its
// key attribute, or not UTF-8), whose key hash cannot be computed from
// what is stored. Records are each read with a strongly consistent
// GetItem.
type KeyHashSearch = dedup.KeyHashSearch

// FindKeyHash looks for the records whose key has dedup.KeyHash keyHash:
// the key_hash that logs and error texts carry instead of the key. The
// table is not indexed by that hash (keeping it would cost every claim a
// write to an index), so this Scans it, reading at most limit items: the
// scan costs read capacity in proportion to the bytes of the items read,
// whatever their number of matches, and no writes. It stops at the end of
// the first page that holds a match. Hooks and metrics see its calls as
// operation "FindKeyHash". It implements dedup.Inspector.
func (s *Store) FindKeyHash(ctx context.Context, keyHash string, limit int) (KeyHashSearch, error) {
	res := KeyHashSearch{Unit: "item", HashedKeys: `"sha256:": too long or not UTF-8`, Metered: true}
	if !isKeyHash(keyHash) {
		return res, fmt.Errorf("%w: got %q", ErrBadKeyHash, keyHash)
	}
	if limit < 1 {
		return res, fmt.Errorf("dynamostore: %w: scan limit %d, want at least 1", ErrInvalidConfig, limit)
	}
	names := map[string]string{"#pk": attrPK}
	projection := "#pk"
	if s.layout.tenant {
		names["#sk"] = attrSK
		projection = "#pk, #sk"
	}
	in := &ddb.ScanInput{
		TableName:                aws.String(s.table),
		ProjectionExpression:     aws.String(projection),
		ExpressionAttributeNames: names,
		ReturnConsumedCapacity:   types.ReturnConsumedCapacityTotal,
	}
	// Matches carry the client of their key's region, where its writes go.
	type match struct {
		item   map[string]types.AttributeValue
		client *ddb.Client
	}
	var matches []match
	for len(matches) == 0 && res.Scanned < limit {
		in.Limit = aws.Int32(int32(min(limit-res.Scanned, 1<<30)))
		var out *ddb.ScanOutput
		err := s.do(ctx, "FindKeyHash", func(ctx context.Context, _ int) (middleware.Metadata, error) {
			o, err := s.clients[0].Scan(ctx, in)
			out = o
			if o == nil {
				return middleware.Metadata{}, err
			}
			return o.ResultMetadata, err
		})
		if err != nil {
			return res, fmt.Errorf("dynamostore: scan for key_hash %s: %w", keyHash, err)
		}
		res.Scanned += len(out.Items)
		if c := out.ConsumedCapacity; c != nil {
			res.ReadUnits += aws.ToFloat64(c.CapacityUnits)
		}
		for _, item := range out.Items {
			key, hashed, ok := s.layout.storedKey(item)
			switch {
			case !ok:
			case hashed:
				// The whole key was hashed: its hash's leading digits
				// are the key hash.
				if strings.HasPrefix(key, hashedPrefix+keyHash) {
					matches = append(matches, match{item, s.clients[0]})
				}
			case key == "":
				res.Unmatchable++
			case dedup.KeyHash(key) == keyHash:
				matches = append(matches, match{item, s.client(key)})
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			res.Exhausted = true
			break
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
	for _, m := range matches {
		rec, units, err := s.getItem(ctx, m.client, m.item)
		res.ReadUnits += units
		if errors.Is(err, dedup.ErrNotFound) {
			continue // deleted since the scan (TTL): no record to show
		}
		if err != nil {
			return res, fmt.Errorf("dynamostore: get key_hash %s: %w", keyHash, err)
		}
		res.Records = append(res.Records, rec)
	}
	return res, nil
}

// getItem reads the record of a scanned item by its key attributes, which
// for a hashed key is the only way back to it: Get would hash it again.
func (s *Store) getItem(ctx context.Context, client *ddb.Client, item map[string]types.AttributeValue) (dedup.Record, float64, error) {
	key := map[string]types.AttributeValue{attrPK: item[attrPK]}
	if s.layout.tenant {
		key[attrSK] = item[attrSK]
	}
	in := &ddb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true),
		ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal}
	var out *ddb.GetItemOutput
	err := s.do(ctx, "FindKeyHash", func(ctx context.Context, _ int) (middleware.Metadata, error) {
		o, err := client.GetItem(ctx, in)
		out = o
		return metadata(o), err
	})
	if err != nil {
		return dedup.Record{}, 0, err
	}
	var units float64
	if c := out.ConsumedCapacity; c != nil {
		units = aws.ToFloat64(c.CapacityUnits)
	}
	if len(out.Item) == 0 {
		return dedup.Record{}, units, dedup.ErrNotFound
	}
	rec, err := decodeRecord(out.Item)
	return rec, units, err
}

// storedKey is the inverse of key for an item's key attributes: the dedup
// key they store, or with hashed set the "sha256:" form of a whole key
// hashed in the default layout. key is empty when part of the key is
// stored hashed and the key cannot be told; ok is false for an item
// without the layout's key attributes.
func (l layout) storedKey(item map[string]types.AttributeValue) (key string, hashed, ok bool) {
	pk, _ := item[attrPK].(*types.AttributeValueMemberS)
	if pk == nil {
		return "", false, false
	}
	if !l.tenant {
		// The three shapes of partitionKey: a whole key hashed has no '#'.
		_, fp, found := strings.Cut(pk.Value, "#")
		switch {
		case !found && strings.HasPrefix(pk.Value, hashedPrefix):
			return pk.Value, true, true
		case found && strings.HasPrefix(fp, hashedPrefix):
			return "", false, true
		}
		return pk.Value, false, true
	}
	sk, _ := item[attrSK].(*types.AttributeValueMemberS)
	if sk == nil {
		return "", false, false
	}
	if strings.HasPrefix(pk.Value, hashedPrefix) || strings.HasPrefix(sk.Value, hashedPrefix) {
		return "", false, true
	}
	// The shard is cut whatever l.shards says, so that a store opened
	// without TenantShards (an operator's) still finds a sharded record.
	return unshard(pk.Value) + "#" + sk.Value, false, true
}

func isKeyHash(h string) bool {
	if len(h) != len(dedup.KeyHash("k")) {
		return false
	}
	for _, c := range h {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
