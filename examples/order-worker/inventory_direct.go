package main

import (
	"errors"

	"github.com/onceq/onceq/dedup"
)

// directInventory is the memory inventory applied by the handler itself,
// for a store that commits no business writes (-store redis): the
// reservation is not atomic with the COMPLETED record, so it guards itself
// against a second application (an order ID reserved once stays so), the
// idempotence every effect outside such a store needs.
type directInventory struct{ *memoryInventory }

// Reserve returns no writes: ReserveNow has applied the reservation.
func (directInventory) Reserve(Order) []dedup.Write { return nil }

// ReserveNow reserves o unless it is already reserved; errOutOfStock when
// the sku holds too little.
func (d directInventory) ReserveNow(o Order) error {
	inv := d.memoryInventory
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if _, done := inv.orders[o.OrderID]; done {
		return nil
	}
	it := inv.stock[o.SKU]
	if it == nil || it.available < o.Qty {
		return errOutOfStock
	}
	it.available -= o.Qty
	it.reserved += o.Qty
	inv.orders[o.OrderID] = o
	return nil
}

// reserveNow applies o through inv when inv applies reservations itself;
// handled is false for an inventory whose reservations are writes.
func reserveNow(inv Inventory, o Order) (resp []byte, handled bool) {
	d, ok := inv.(directInventory)
	if !ok {
		return nil, false
	}
	if err := d.ReserveNow(o); errors.Is(err, errOutOfStock) {
		return rejectedResponse, true
	}
	return reservedResponse, true
}
