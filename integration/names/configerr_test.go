package names

import (
	"context"
	"errors"
	"testing"

	"github.com/onceq/onceq/consumer"
	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/dedup/redisstore"
	"github.com/onceq/onceq/franztxn"
	"github.com/onceq/onceq/lambda/kafkalambda"
	"github.com/onceq/onceq/lambda/sqslambda"
	"github.com/onceq/onceq/sources/franzsource"
	"github.com/onceq/onceq/sources/kafkagroup"
	"github.com/onceq/onceq/sources/kafkasource"
	"github.com/onceq/onceq/sources/sqssource"
)

// Every package's configuration error is one error: a check written
// against any package's ErrInvalidConfig recognises a refusal by any other,
// and the text still names the package that refused.
func TestOneConfigurationError(t *testing.T) {
	ctx := context.Background()
	refusals := map[string]error{}
	_, refusals["consumer"] = consumer.New(nil, nil, nil)
	_, refusals["dynamostore"] = dynamostore.New(nil)
	_, refusals["pgstore"] = pgstore.New(nil)
	_, refusals["redisstore"] = redisstore.New(nil)
	_, refusals["sqssource"] = sqssource.New(ctx, nil, "")
	_, refusals["kafkasource"] = kafkasource.New(ctx, nil, "", nil)
	_, refusals["franzsource"] = franzsource.New(ctx, nil, "", nil)
	_, refusals["franztxn"] = franztxn.New(ctx, nil, "", nil, "", nil)
	_, refusals["sqslambda"] = sqslambda.New(nil, nil)
	_, refusals["kafkalambda"] = kafkalambda.New(nil, nil)
	sentinels := map[string]error{
		"consumer": consumer.ErrInvalidConfig, "dynamostore": dynamostore.ErrInvalidConfig,
		"sqssource": sqssource.ErrInvalidConfig, "kafkagroup": kafkagroup.ErrInvalidConfig,
		"sqslambda": sqslambda.ErrInvalidConfig, "kafkalambda": kafkalambda.ErrInvalidConfig,
		"pgstore": pgstore.ErrInvalidConfig, "redisstore": redisstore.ErrInvalidConfig,
	}
	for pkg, err := range refusals {
		if err == nil {
			t.Errorf("%s accepted a configuration with nothing in it", pkg)
			continue
		}
		for name, sentinel := range sentinels {
			if !errors.Is(err, sentinel) {
				t.Errorf("%s refused with %q, not errors.Is %s.ErrInvalidConfig", pkg, err, name)
			}
		}
		if got := err.Error(); len(got) < len(pkg) || got[:len(pkg)] != pkg {
			t.Errorf("%s refused with %q, which does not name the package", pkg, got)
		}
	}
}
