package main

import (
	"errors"
	"fmt"
	"sync"

	"github.com/onceq/onceq/dedup"
	"github.com/onceq/onceq/dedup/memstore"
)

// memoryInventory keeps stock and orders in the process, for the embedded
// default. Its writes are dedup/memstore Writes.
type memoryInventory struct {
	mu     sync.Mutex
	stock  map[string]*stockItem
	orders map[string]Order
}

type stockItem struct{ available, reserved int64 }

func newMemoryInventory(skus int, available int64) *memoryInventory {
	inv := &memoryInventory{stock: map[string]*stockItem{}, orders: map[string]Order{}}
	for i := range skus {
		inv.stock[fmt.Sprintf("sku-%d", i)] = &stockItem{available: available}
	}
	return inv
}

var errOutOfStock = errors.New("out of stock")

func (inv *memoryInventory) Reserve(o Order) []dedup.Write {
	return []dedup.Write{memstore.Write{
		Check: func() error {
			inv.mu.Lock()
			defer inv.mu.Unlock()
			if it := inv.stock[o.SKU]; it == nil || it.available < o.Qty {
				return errOutOfStock
			}
			return nil
		},
		Apply: func() {
			inv.mu.Lock()
			defer inv.mu.Unlock()
			it := inv.stock[o.SKU]
			it.available -= o.Qty
			it.reserved += o.Qty
			inv.orders[o.OrderID] = o
		},
	}}
}

// totals reports reserved units and order rows.
func (inv *memoryInventory) totals() (reserved int64, orders int) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, it := range inv.stock {
		reserved += it.reserved
	}
	return reserved, len(inv.orders)
}
