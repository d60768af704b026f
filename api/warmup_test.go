package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// Redis lost an item's stock key mid-sale: the warmup loads what Redis should
// hold (the stock row minus the live reservations not deducted yet), not
// stock_total, while buyers keep buying and sagas keep deducting. Never more
// 202s than units.
func TestWarmupAfterLostStockDuringAStampede(t *testing.T) {
	const units, first, more = 40, 20, 40
	h := newHarness(t)
	ctx := context.Background()
	item := h.activeItem(units)
	var accepted atomic.Int64
	var mu sync.Mutex
	var orders []string
	buy := func(buyer int64) int {
		r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(buyer), nil)
		if r.status == http.StatusAccepted {
			accepted.Add(1)
			mu.Lock()
			orders = append(orders, r.json(t)["order_id"].(string))
			mu.Unlock()
		}
		return r.status
	}
	for b := int64(1); b <= first; b++ {
		if s := buy(b); s != http.StatusAccepted {
			t.Fatalf("buyer %d: %d", b, s)
		}
	}
	// The sagas of the first 8 took their units from the stock row.
	deduct := func(i int) {
		mu.Lock()
		id := orders[i]
		mu.Unlock()
		if _, err := h.db.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: int64(i + 1), ItemID: item}); err != nil {
			t.Error(err)
			return
		}
		if _, _, err := h.db.DeductStock(ctx, id, item, 10*time.Minute); err != nil {
			t.Error(err)
		}
	}
	for i := range 8 {
		deduct(i)
	}
	if err := h.rdb.Del(ctx, h.stk.ItemKeys(item).Stock).Err(); err != nil {
		t.Fatal(err)
	}
	// The stampede: more buyers than units left, and the other sagas
	// deducting, while the operator warms the item up.
	var wg sync.WaitGroup
	for b := int64(first + 1); b <= first+more; b++ {
		wg.Go(func() {
			for buy(b) == http.StatusServiceUnavailable { // not loaded yet
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	for i := 8; i < first; i++ {
		wg.Go(func() { deduct(i) })
	}
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", item), h.admin, nil), http.StatusOK, "")
	wg.Wait()

	if n := accepted.Load(); n != units {
		t.Fatalf("%d purchases accepted for %d units", n, units)
	}
	left, err := h.stk.Left(ctx, item)
	if err != nil || left != 0 {
		t.Fatalf("stock_left %d (%v), want 0", left, err)
	}
}

// Redis lost everything of an item mid-sale, while sagas lag behind: orders
// persisted QUEUED (not deducted yet) and orders paid at the 202 (the door's
// QUEUED row) hold units the stock row still counts. The warm-up puts their
// reservations and buyer marks back before it counts, so it loads only the
// units nobody holds: the buyers who come after it (racing it, and the lagging
// sagas deducting meanwhile) get exactly those, every saga then takes its unit
// (no STOCK_EXHAUSTED, no REFUNDED), the buyers who held orders are still
// refused a second one, and the invariant checker is clean.
func TestWarmupKeepsUnitsOfQueuedOrders(t *testing.T) {
	const units, newBuyers = 20, 40
	ctx := context.Background()
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		desk, err := payment.New(d.Items.(*store.Store), d.Views.(payment.Statuses), d.Views.(payment.Views), d.Units.(payment.Reservations),
			func() (payment.Sagas, error) { return nil, apierr.ErrUnavailable }, &counter{}, payment.Options{WakeRate: 1000}, testkit.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		d.Actions = desk
	})
	item := h.activeItem(units)
	var mu sync.Mutex
	accepted := map[string]int64{} // order id -> buyer, every 202
	buy := func(buyer int64) response {
		r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(buyer), nil)
		if r.status == http.StatusAccepted {
			mu.Lock()
			accepted[r.json(t)["order_id"].(string)] = buyer
			mu.Unlock()
		}
		return r
	}
	ids := map[int64]string{}
	for b := int64(1); b <= 11; b++ {
		r := buy(b)
		expect(t, r, http.StatusAccepted, "")
		ids[b] = r.json(t)["order_id"].(string)
	}
	persist := func(b int64) {
		m, ok, err := h.stk.Reservation(ctx, item, ids[b])
		if err != nil || !ok {
			t.Fatalf("reservation of buyer %d: %v %v", b, ok, err)
		}
		if _, err := h.db.CreateQueuedOrder(ctx, store.Order{OrderID: m.OrderID, UserID: b, ItemID: item, PayBy: m.PayBy}); err != nil {
			t.Fatal(err)
		}
	}
	// The sagas of 1-4 took their units (1 then paid); those of 5-8 only
	// persisted their orders (the backlog); 9 and 10 paid at the 202 and 11
	// cancelled at it, before any saga ran.
	for b := int64(1); b <= 8; b++ {
		persist(b)
	}
	for b := int64(1); b <= 4; b++ {
		if _, _, err := h.db.DeductStock(ctx, ids[b], item, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for b, verb := range map[int64]string{1: "pay", 9: "pay", 10: "pay", 11: "cancel"} {
		expect(t, h.do("POST", "/api/v1/orders/"+ids[b]+"/"+verb, h.buyer(b), nil), http.StatusOK, "")
	}
	// 10 units held (1-10), 4 of them deducted: the stock row has 16, of
	// which 6 are held by orders not deducted yet.
	if row, err := h.db.ReadItemState(ctx, item); err != nil || row.Stock.Stock != units-4 {
		t.Fatalf("stock row %d (%v), want %d", row.Stock.Stock, err, units-4)
	}

	// Redis loses every key of the sale.
	k := h.stk.ItemKeys(item)
	if err := h.rdb.Del(ctx, k.Stock, k.Buyers, k.Orders, k.Outbox, k.Released).Err(); err != nil {
		t.Fatal(err)
	}

	// New buyers race the warm-up (503 until the stock is loaded), and two
	// of the lagging sagas deduct meanwhile; the other four come after.
	var wg sync.WaitGroup
	for b := int64(101); b <= 100+newBuyers; b++ {
		wg.Go(func() {
			for buy(b).status == http.StatusServiceUnavailable {
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	deductErrs := make(chan error, 6)
	for b := int64(5); b <= 6; b++ {
		wg.Go(func() {
			_, _, err := h.db.DeductStock(ctx, ids[b], item, 10*time.Minute)
			deductErrs <- err
		})
	}
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", item), h.admin, nil), http.StatusOK, "")
	wg.Wait()
	for b := int64(7); b <= 10; b++ {
		_, _, err := h.db.DeductStock(ctx, ids[b], item, 10*time.Minute)
		deductErrs <- err
	}
	close(deductErrs)
	for err := range deductErrs {
		if err != nil {
			t.Errorf("a lagging saga's deduction after the warm-up: %v", err)
		}
	}
	if n := len(accepted) - 11; n != units-10 {
		t.Fatalf("%d new buyers accepted after the warm-up, want %d (10 of %d units are held)", n, units-10, units)
	}
	// The buyers who held orders are still marked: no second order.
	for b := int64(1); b <= 10; b++ {
		expect(t, buy(b), http.StatusConflict, "ALREADY_PURCHASED")
	}

	// The repair after the warm-up, then the new orders' sagas: each one
	// takes its unit.
	r := reconcile.New(reconcile.Deps{MySQL: h.db, Units: h.stk, Outbox: h.ob}, 0, testkit.Logger(t))
	if rep, err := r.Run(ctx, []int64{item}, true); err != nil || len(rep.Findings) != 0 {
		t.Fatalf("reconcile after the warm-up: %+v %v, want nothing to repair", rep.Findings, err)
	}
	for id, b := range accepted {
		if b <= 11 {
			continue
		}
		m, ok, err := h.stk.Reservation(ctx, item, id)
		if err != nil || !ok {
			t.Fatalf("reservation of %s: %v %v", id, ok, err)
		}
		if _, err := h.db.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: b, ItemID: item, PayBy: m.PayBy}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := h.db.DeductStock(ctx, id, item, 10*time.Minute); err != nil {
			t.Errorf("the saga of order %s (a 202 after the warm-up): %v", id, err)
		}
	}
	for _, b := range []int64{9, 10} {
		if o, err := h.db.FindOrder(ctx, ids[b]); err != nil || o.Status != order.StatusPaid {
			t.Errorf("order paid at the 202 by buyer %d: %+v %v, want PAID", b, o, err)
		}
	}
	var acc []invariant.Accepted
	for id, b := range accepted {
		acc = append(acc, invariant.Accepted{OrderID: id, UserID: b})
	}
	rep, err := invariant.Check(ctx, invariant.Deps{Store: h.db, Stock: h.stk},
		invariant.Input{ItemID: item, Accepted: acc, AcceptedComplete: true, SoldOutSeen: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("invariant checker: %v", rep.Violations)
	}
}
