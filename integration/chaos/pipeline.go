package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/examples/storehistory"
	"github.com/onceq/onceq/outbox"
)

// With -pipeline a run has two stages: the order workers (stage 1) send
// an order.reserved event per reserved order through the store's outbox
// to a second queue or topic; relay processes (onceq relay) send the
// outbox's entries there; shipping workers (stage 2, the order worker
// with -ship) record one shipment per event, committed with the event's
// COMPLETED record. Workers, relays and shipping workers are all killed.

// role is what a process of the pool runs.
type role int

const (
	roleOrder role = iota
	roleRelay
	roleShip
	roleTxn // -txn's processors
)

func (r role) String() string {
	return [...]string{"worker", "relay", "ship", "txn"}[r]
}

// roleOf is the role of the pool's i'th process: the order workers first,
// then, with -pipeline, the relays, then the shipping workers; with -txn
// every process is a txn worker.
func roleOf(cfg settings, i int) role {
	switch {
	case cfg.txn:
		return roleTxn
	case !cfg.pipeline || i < cfg.workers:
		return roleOrder
	case i < cfg.workers+cfg.relays:
		return roleRelay
	}
	return roleShip
}

// processes is how many processes the pool runs.
func processes(cfg settings) int {
	if !cfg.pipeline {
		return cfg.workers
	}
	return cfg.workers + cfg.relays + cfg.shipWorkers
}

// pipelineResult is what the second stage saw and checked.
type pipelineResult struct {
	relayKills, shipKills int
	// shipped counts orders with a shipment; lost the reserved orders
	// with none; doubled the shipments past the first of an order.
	shipped, lost, doubled int
	// absorbed counts the copies of an event that stage 2's dedup found
	// COMPLETED already (a relay's re-dispatch or a redelivery).
	absorbed int
	// outboxPending is what the outbox still held at the end.
	outboxPending int
	// shipments are the shipments by order ID, as the table counts them.
	shipments map[string]int64
}

func (p *pipelineResult) line() string {
	return fmt.Sprintf("chaos: pipeline: shipped=%d lost=%d doubled=%d redispatches_absorbed=%d outbox_pending=%d relay_kills=%d ship_kills=%d",
		p.shipped, p.lost, p.doubled, p.absorbed, p.outboxPending, p.relayKills, p.shipKills)
}

// outboxOf is the outbox of store (every store the chaos run uses has one).
func outboxOf(store dedup.Store) (outbox.Store, error) {
	ob := store.Capabilities().Outbox
	if ob == nil {
		return nil, fmt.Errorf("the %T store keeps no outbox", store)
	}
	return ob, nil
}

// outboxPending counts the outbox's Pending entries (at most limit).
func outboxPending(ctx context.Context, ob outbox.Store, limit int) (int, error) {
	es, err := ob.Entries(ctx, outbox.Pending, limit)
	if err != nil {
		return 0, fmt.Errorf("outbox entries: %w", err)
	}
	return len(es), nil
}

// verifyPipeline checks that every reserved order shipped exactly once.
func verifyPipeline(ctx context.Context, tb tables, ob outbox.Store, tmp string, want expected, p *pipelineResult) error {
	shipped, err := tb.shipments(ctx)
	if err != nil {
		return err
	}
	for id := range want.orders {
		switch n := shipped[id]; {
		case n == 0:
			p.lost++
		case n > 1:
			p.doubled += int(n - 1)
		}
	}
	for id, n := range shipped {
		if _, ok := want.orders[id]; !ok {
			p.doubled += int(n) // a shipment of no order is an effect too many
		}
	}
	p.shipped, p.shipments = len(shipped), shipped
	if p.outboxPending, err = outboxPending(ctx, ob, 1000); err != nil {
		return err
	}
	p.absorbed, err = absorbed(filepath.Join(tmp, "ship-*.history"))
	return err
}

// workerNamespace is the order worker's key namespace (the consumer's
// default): its records' keys are "<namespace>#<key>".
const workerNamespace = "onceq"

// shipKey is the record key of order id's order.reserved event at the
// shipping workers: its outbox ID (the reserving record's key, and the
// index of the event among the messages it sent, the only one), which
// the relay sends as the event's idempotency key.
func shipKey(id string) (string, error) {
	k, err := dedup.Key(workerNamespace, id)
	if err != nil {
		return "", err
	}
	return dedup.Key(workerNamespace, outbox.ID(k, 0))
}

// effects are the times each shipping record's effect was applied, by its
// key: the order's shipments, which every commit of its event adds one
// to. Every order reserved is counted, shipped or not.
func (p *pipelineResult) effects(want expected) (map[string]int, error) {
	fx := map[string]int{}
	add := func(id string, n int64) error {
		k, err := shipKey(id)
		if err != nil {
			return fmt.Errorf("a shipment whose order ID is no key: %w", err)
		}
		fx[k] = int(n)
		return nil
	}
	for id := range want.orders {
		if err := add(id, p.shipments[id]); err != nil {
			return nil, err
		}
	}
	for id, n := range p.shipments {
		if err := add(id, n); err != nil {
			return nil, err
		}
	}
	return fx, nil
}

// absorbed counts, in the shipping workers' histories, the claims that
// found their event's record COMPLETED: each a copy of an event the
// dedup absorbed.
func absorbed(glob string) (int, error) {
	paths, err := filepath.Glob(glob)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return 0, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			var e storehistory.Event
			if json.Unmarshal(sc.Bytes(), &e) != nil {
				continue // a killed process's last line may be cut
			}
			if e.Kind == storehistory.KindReturn && (e.Op == storehistory.OpClaim || e.Op == storehistory.OpClaimComplete) &&
				e.Outcome == storehistory.OutcomeOK && !e.Acquired && e.Record != nil && e.Record.Status == dedup.StatusCompleted {
				n++
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", path, err)
		}
	}
	return n, nil
}

// shipments of the DynamoDB run: shipped by order ID.
func (d dynamoTables) shipments(ctx context.Context) (map[string]int64, error) {
	got := map[string]int64{}
	return got, scan(ctx, d.db, d.n.shipments, func(it map[string]ddbtypes.AttributeValue) {
		id, _ := it["order_id"].(*ddbtypes.AttributeValueMemberS)
		n, _ := it["shipped"].(*ddbtypes.AttributeValueMemberN)
		if id != nil && n != nil {
			got[id.Value], _ = strconv.ParseInt(n.Value, 10, 64)
		}
	})
}

// shipments of the PostgreSQL run.
func (p pgTables) shipments(ctx context.Context) (map[string]int64, error) {
	rows, err := p.pg.Query(ctx, "SELECT order_id, shipped FROM "+p.n.shipments)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	got := map[string]int64{}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		got[id] = n
	}
	return got, rows.Err()
}

// relayArgs are the onceq relay flags of a relay process: the run's
// store and table, the shipping broker's sender, a short poll, and the
// relay's own lease and pass size unless -relay-lease-ttl or -relay-batch
// set them: the run checks that its defaults hold under the injected
// faults, a pass marking its entries before its lease ends.
func (p *pool) relayArgs() []string {
	args := []string{"relay", "-table", p.names.idem, "-poll", "100ms", "-concurrency", "4"}
	if p.cfg.relayLease > 0 {
		args = append(args, "-lease-ttl", p.cfg.relayLease.String())
	}
	if p.cfg.relayBatch > 0 {
		args = append(args, "-batch", strconv.Itoa(p.cfg.relayBatch))
	}
	if p.cfg.store == "postgres" {
		args = append(args, "-store", "postgres", "-postgres-url", p.cfg.postgresURL)
	} else {
		args = append(args, "-store", "dynamodb")
	}
	return append(args, p.ship.senderArgs()...)
}

// pipelineLeft counts what is not yet settled in either stage: the
// orders, the outbox's Pending entries and the shipping events.
func pipelineLeft(orders broker, ob outbox.Store, ship broker) func(context.Context) (int, string, error) {
	return func(ctx context.Context) (int, string, error) {
		n1, d1, err := orders.left(ctx)
		if err != nil {
			return 0, "", err
		}
		pending, err := outboxPending(ctx, ob, 100)
		if err != nil {
			return 0, "", err
		}
		n2, d2, err := ship.left(ctx)
		if err != nil {
			return 0, "", err
		}
		more := ""
		if pending == 100 {
			more = " or more"
		}
		return n1 + pending + n2, fmt.Sprintf("orders: %s; outbox: %d%s pending; shipping: %s", d1, pending, more, d2), nil
	}
}
