package dynamostore_test

import (
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/dynamostore/audit"
	"github.com/onceq/onceq/retry"
)

// One option type per constructor: an option only CreateTable or only
// audit.New reads is not an Option (New refuses it at compile time, and a
// type assertion cannot smuggle it in), while every Option is read where
// it applies, so the layout has one name.
func TestOneOptionTypePerConstructor(t *testing.T) {
	notForNew := map[string]any{
		"WithStream": dynamostore.WithStream(), "TableWaitTimeout": dynamostore.TableWaitTimeout(time.Second),
		"ArchiveRetention": audit.ArchiveRetention(time.Hour), "AnyDeleteIsTTL": audit.AnyDeleteIsTTL(),
		"FromStreamStart": audit.FromStreamStart(), "PollInterval": audit.PollInterval(time.Second),
	}
	for name, o := range notForNew {
		if _, ok := o.(dynamostore.Option); ok {
			t.Errorf("%s is an Option, yet a Store has nothing for it to set", name)
		}
	}
	if _, ok := any(dynamostore.WithStream()).(audit.Option); ok {
		t.Error("WithStream is an audit.Option, yet an Auditor makes no table")
	}
	if _, ok := any(audit.PollInterval(time.Second)).(dynamostore.TableOption); ok {
		t.Error("PollInterval is a TableOption, yet CreateTable reads no stream")
	}
	// Compile-time: each Option is a TableOption.
	var shared = []dynamostore.Option{dynamostore.TenantLayout(), dynamostore.NamespaceLayout(), dynamostore.TenantShards(2),
		dynamostore.WithLogger(slog.Default()), dynamostore.WithMeterProvider(noop.NewMeterProvider()),
		dynamostore.WithRetryPolicy(retry.DefaultPolicy()), dynamostore.WithoutClockCheck(), dynamostore.WithArchive("a")}
	for _, o := range shared {
		var _ dynamostore.TableOption = o
	}
}
