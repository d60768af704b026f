package api_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/store"
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
