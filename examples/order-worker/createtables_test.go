package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/onceq/onceq/dedup/dynamostore"
	"github.com/onceq/onceq/dedup/pgstore"
	"github.com/onceq/onceq/internal/testsupport/testenv"
)

// -create-tables from empty makes every table the demo uses, on each
// store: the worker reserves its orders and ships each reserved one
// through the outbox (where the store keeps one), with no table missing.
func TestDemoCreatesItsTables(t *testing.T) {
	for _, store := range []string{"memory", "dynamodb", "postgres", "redis"} {
		t.Run(store, func(t *testing.T) {
			b := make([]byte, 4)
			_, _ = rand.Read(b)
			suffix := hex.EncodeToString(b)
			idem, inv, orders := "ct_idem_"+suffix, "ct_inv_"+suffix, "ct_orders_"+suffix
			args := []string{"-demo", "60", "-store", store, "-create-tables", "-idempotency-table", idem, "-inventory-table", inv, "-orders-table", orders,
				"-progress", "1h", "-metrics-addr", ""}
			switch store {
			case "dynamodb":
				_, db, _ := localAWS(t)
				t.Cleanup(func() {
					for _, n := range []string{idem, dynamostore.OutboxTable(idem), dynamostore.OffsetsTable(idem), inv, orders} {
						_, _ = db.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(n)})
					}
				})
			case "postgres":
				url := testenv.PostgresURL(t)
				args = append(args, "-postgres-url", url)
				pool, err := pgxpool.New(t.Context(), url)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					_, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+strings.Join([]string{idem, pgstore.OutboxTable(idem), pgstore.OffsetsTable(idem), inv, orders}, ", ")+
						"; DROP SEQUENCE IF EXISTS "+pgstore.OutboxSequence(idem))
					pool.Close()
				})
			case "redis":
				args = append(args, "-redis-addr", testenv.RedisAddr(t))
			}
			var out, errOut bytes.Buffer
			if code := run(args, &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			var s Summary
			if err := json.Unmarshal(out.Bytes(), &s); err != nil {
				t.Fatalf("summary %q: %v", out.String(), err)
			}
			if s.Processed == 0 || store != "redis" && s.Shipped != s.Processed || strings.Contains(errOut.String(), "WARN") {
				t.Fatalf("summary %+v; want every reserved order shipped, no warning: %s", s, errOut.String())
			}
		})
	}
}

// A worker that sends onward over a records table without its outbox
// table names the outbox table, and what creates it.
func TestMissingOutboxTableNamed(t *testing.T) {
	_, db, suffix := localAWS(t)
	idem, inv, orders := "mo_idem_"+suffix, "mo_inv_"+suffix, "mo_orders_"+suffix
	if err := dynamostore.CreateTable(t.Context(), db, idem); err != nil {
		t.Fatal(err)
	}
	if err := createExampleTables(t.Context(), db, inv, orders, 1, 10); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{idem, dynamostore.OffsetsTable(idem), inv, orders} {
			_, _ = db.DeleteTable(context.Background(), &ddb.DeleteTableInput{TableName: aws.String(n)})
		}
	})
	ob := dynamostore.OutboxTable(idem)
	startFails(t, []string{"-demo", "10", "-store", "dynamodb", "-idempotency-table", idem, "-inventory-table", inv, "-orders-table", orders},
		`order-worker: the outbox table "`+ob+"\" does not exist: create it with `onceq create-table -table "+idem+" -outbox` or pass -create-tables")
}
