// Package stocktwin is an in-memory twin of stock.Store for the unit tests
// of its callers: the same rules as stock's Lua scripts (one order per buyer
// per item, never below zero, the released set, the recount's shortfall, the
// adds), held to them by Contract, which runs the same assertions on the
// real store in Redis (stock's contract_test.go) and on the twin. Tests
// import it; production code uses stock.Store.
package stocktwin

import (
	"context"
	"fmt"
	"sync"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

// item is one item's keys (keyspace.Item): a field per key.
type item struct {
	left     int64 // stock_left; meaningful when loaded
	loaded   bool  // the stock key exists
	buyers   map[int64]string
	orders   map[string]order.Message
	released map[string]bool
	adds     map[string]int64 // add id -> units, and "<add id>:short" -> the shortfall it covered
	short    int64
	rev      int64
	outbox   int64 // entries ever appended (the relay trims the real one)
}

// Twin is the live stock of any number of items, safe for concurrent use.
// Each method is atomic, as each script is.
type Twin struct {
	mu        sync.Mutex
	items     map[int64]*item
	unitsBack []func(int64)
	changed   []func(int64)
}

func New() *Twin { return &Twin{items: map[int64]*item{}} }

// at returns the item's keys, creating empty ones (t.mu held).
func (t *Twin) at(itemID int64) *item {
	it, ok := t.items[itemID]
	if !ok {
		it = &item{buyers: map[int64]string{}, orders: map[string]order.Message{},
			released: map[string]bool{}, adds: map[string]int64{}}
		t.items[itemID] = it
	}
	return it
}

// announce calls the watchers of fns with itemID (t.mu not held: a watcher
// may call the twin).
func announce(fns []func(int64), itemID int64) {
	for _, fn := range fns {
		fn(itemID)
	}
}

func (t *Twin) snapshot(fns []func(int64)) []func(int64) { return append([]func(int64){}, fns...) }

// Load is stock.Store.Load: SET NX.
func (t *Twin) Load(_ context.Context, itemID, units int64) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	if it.loaded {
		return false, nil
	}
	it.left, it.loaded = units, true
	return true, nil
}

// Recount is count.lua.
func (t *Twin) Recount(_ context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (old, want int64, err error) {
	t.mu.Lock()
	it := t.at(itemID)
	old = -1
	if it.loaded {
		old = it.left
	}
	if mode == stock.Warm && old >= 0 {
		t.mu.Unlock()
		return old, old, nil
	}
	held := make(map[string]bool, len(deducted))
	for _, id := range deducted {
		held[id] = true
	}
	var pending int64
	for id := range it.orders {
		if !held[id] {
			pending++
		}
	}
	want = stockRow - pending
	var short int64
	if want < 0 {
		want, short = 0, -want
	}
	back := false
	if mode != stock.Check {
		clear(it.adds)
		it.short = short
		if old != want {
			it.left, it.loaded = want, true
			back = want > old && want > 0
		}
	}
	fns := t.snapshot(t.unitsBack)
	t.mu.Unlock()
	if back {
		announce(fns, itemID)
	}
	return old, want, nil
}

// Left is stock.Store.Left.
func (t *Twin) Left(_ context.Context, itemID int64) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	if !it.loaded {
		return 0, fmt.Errorf("item %d: %w", itemID, stock.ErrNotLoaded)
	}
	return it.left, nil
}

// LeftMany is stock.Store.LeftMany: an item not loaded is absent.
func (t *Twin) LeftMany(_ context.Context, itemIDs []int64) (map[int64]int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int64]int64, len(itemIDs))
	for _, id := range itemIDs {
		if it := t.at(id); it.loaded {
			out[id] = it.left
		}
	}
	return out, nil
}

// Reserve is reserve_batch.lua for a batch of one, answered as
// stock.Store.Reserve answers: the buyer's mark holding this very order id
// (a retry of a script whose reply was lost) is the unit taken, with 1 left.
func (t *Twin) Reserve(_ context.Context, r order.Message) (int64, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(r.ItemID)
	if id, ok := it.buyers[r.UserID]; ok {
		if id == r.OrderID {
			return 1, nil
		}
		return 0, &stock.AlreadyReservedError{OrderID: id}
	}
	if !it.loaded {
		return 0, fmt.Errorf("item %d: %w", r.ItemID, stock.ErrNotLoaded)
	}
	if it.left <= 0 {
		return 0, stock.ErrSoldOut
	}
	it.left--
	it.buyers[r.UserID] = r.OrderID
	it.orders[r.OrderID] = r
	it.outbox++
	return it.left, nil
}

// Release is release.lua in "release" mode.
func (t *Twin) Release(_ context.Context, itemID int64, orderID string) (bool, error) {
	return t.giveBack(itemID, orderID, true)
}

// Retire is release.lua in "retire" mode.
func (t *Twin) Retire(_ context.Context, itemID int64, orderID string) (bool, error) {
	return t.giveBack(itemID, orderID, false)
}

func (t *Twin) giveBack(itemID int64, orderID string, release bool) (bool, error) {
	t.mu.Lock()
	it := t.at(itemID)
	it.released[orderID] = true
	if _, ok := it.orders[orderID]; !ok {
		t.mu.Unlock()
		return false, nil
	}
	delete(it.orders, orderID)
	back := false
	switch {
	case !it.loaded: // a lost stock key stays lost
	case it.short > 0:
		it.short--
	case release:
		it.left++
		back = true
	}
	fns := t.snapshot(t.unitsBack)
	t.mu.Unlock()
	if back {
		announce(fns, itemID)
	}
	return true, nil
}

// Reservation is stock.Store.Reservation.
func (t *Twin) Reservation(_ context.Context, itemID int64, orderID string) (order.Message, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.at(itemID).orders[orderID]
	return m, ok, nil
}

// RestoreAll is restore.lua (one call: the twin has no chunks).
func (t *Twin) RestoreAll(_ context.Context, itemID int64, ms []order.Message) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range ms {
		if m.ItemID != itemID {
			return 0, fmt.Errorf("restore reservation %s: item %d, not %d", m.OrderID, m.ItemID, itemID)
		}
	}
	it := t.at(itemID)
	restored := 0
	for _, m := range ms {
		if it.released[m.OrderID] {
			continue
		}
		if _, ok := it.buyers[m.UserID]; !ok {
			it.buyers[m.UserID] = m.OrderID
		}
		if _, ok := it.orders[m.OrderID]; !ok {
			it.orders[m.OrderID] = m
			restored++
		}
	}
	return restored, nil
}

// BuyerOrder is stock.Store.BuyerOrder.
func (t *Twin) BuyerOrder(_ context.Context, itemID, userID int64) (string, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	id, ok := t.at(itemID).buyers[userID]
	return id, ok, nil
}

// BuyerOrders is stock.Store.BuyerOrders.
func (t *Twin) BuyerOrders(_ context.Context, itemIDs []int64, userID int64) (map[int64]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[int64]string{}
	for _, id := range itemIDs {
		if o, ok := t.at(id).buyers[userID]; ok {
			out[id] = o
		}
	}
	return out, nil
}

// MarkedBuyers is stock.Store.MarkedBuyers.
func (t *Twin) MarkedBuyers(_ context.Context, itemID, max int64) (map[int64]struct{}, bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	if int64(len(it.buyers)) > max {
		return nil, false, nil
	}
	out := make(map[int64]struct{}, len(it.buyers))
	for u := range it.buyers {
		out[u] = struct{}{}
	}
	return out, true, nil
}

// ReadItemState is stock.Store.ReadItemState.
func (t *Twin) ReadItemState(_ context.Context, itemID int64) (stock.ItemState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	st := stock.ItemState{Left: -1, Reservations: map[string]order.Message{}, Marks: map[int64]string{}, Released: map[string]bool{}}
	if it.loaded {
		st.Left = it.left
	}
	for id, m := range it.orders {
		st.Reservations[id] = m
	}
	for u, id := range it.buyers {
		st.Marks[u] = id
	}
	for id := range it.released {
		st.Released[id] = true
	}
	return st, nil
}

// Pulses is stock.Store.Pulses; Outbox counts every reservation (nothing
// trims the twin's outbox).
func (t *Twin) Pulses(_ context.Context, itemIDs []int64) (map[int64]stock.Pulse, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[int64]stock.Pulse, len(itemIDs))
	for _, id := range itemIDs {
		it := t.at(id)
		p := stock.Pulse{Rev: it.rev, Marks: int64(len(it.buyers)), Outbox: it.outbox}
		if it.loaded {
			p.Left, p.Loaded = it.left, true
		}
		out[id] = p
	}
	return out, nil
}

// AddUnits is add.lua.
func (t *Twin) AddUnits(_ context.Context, itemID int64, addID string, n int64) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	if !it.loaded {
		return false, nil
	}
	if _, ok := it.adds[addID]; ok {
		return true, nil
	}
	it.adds[addID] = n
	cover := min(it.short, n)
	if cover > 0 {
		it.adds[addID+":short"] = cover
		it.short -= cover
	}
	it.left += n - cover
	return true, nil
}

// UndoAdd is unadd.lua.
func (t *Twin) UndoAdd(_ context.Context, itemID int64, addID string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	n, ok := it.adds[addID]
	if !ok {
		return false, nil
	}
	cover := it.adds[addID+":short"]
	delete(it.adds, addID)
	delete(it.adds, addID+":short")
	// DECRBY creates a missing key, as in Redis.
	it.left -= n - cover
	it.loaded = true
	it.short += cover
	return true, nil
}

// AnnounceItem is stock.Store.AnnounceItem: the revision moves, the item
// watchers hear it, and with unitsBack the units-back watchers too.
func (t *Twin) AnnounceItem(_ context.Context, itemID int64, unitsBack bool) (int64, error) {
	t.mu.Lock()
	it := t.at(itemID)
	it.rev++
	rev := it.rev
	changed, back := t.snapshot(t.changed), t.snapshot(t.unitsBack)
	t.mu.Unlock()
	announce(changed, itemID)
	if unitsBack {
		announce(back, itemID)
	}
	return rev, nil
}

// WatchUnitsBack is stock.Store.WatchUnitsBack: fn hears of every unit that
// comes back, from the moment of the call (unlike pub/sub, nothing is lost).
func (t *Twin) WatchUnitsBack(ctx context.Context, fn func(itemID int64)) {
	t.mu.Lock()
	t.unitsBack = append(t.unitsBack, fn)
	t.mu.Unlock()
	<-ctx.Done()
}

// WatchItems is stock.Store.WatchItems.
func (t *Twin) WatchItems(ctx context.Context, fn func(itemID int64)) {
	t.mu.Lock()
	t.changed = append(t.changed, fn)
	t.mu.Unlock()
	<-ctx.Done()
}

// LoseStock deletes the item's stock key, as a Redis that lost writes (or
// an operator's DEL) leaves it: the reservations, marks and released set
// stay.
func (t *Twin) LoseStock(itemID int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	it := t.at(itemID)
	it.left, it.loaded = 0, false
}
