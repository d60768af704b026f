package api_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// lostCommitReply is the real MySQL whose next AddStock commits and then
// answers an error, as a COMMIT whose reply the network lost does.
type lostCommitReply struct {
	*store.Store
	drop atomic.Bool
}

func (l *lostCommitReply) AddStock(ctx context.Context, id, n int64, key, addID string,
	inRedis func(context.Context, store.Item) error) (store.Item, bool, error) {
	it, replayed, err := l.Store.AddStock(ctx, id, n, key, addID, inRedis)
	if err == nil && l.drop.CompareAndSwap(true, false) {
		return store.Item{}, false, fmt.Errorf("commit: %w", driver.ErrBadConn)
	}
	return it, replayed, err
}

// failingAnnounce is the real Redis whose next announcement fails.
type failingAnnounce struct {
	*stock.Store
	fail atomic.Bool
}

func (f *failingAnnounce) AnnounceItem(ctx context.Context, id int64, unitsBack bool) (int64, error) {
	if f.fail.CompareAndSwap(true, false) {
		return 0, fmt.Errorf("announce: %w", driver.ErrBadConn)
	}
	return f.Store.AnnounceItem(ctx, id, unitsBack)
}

// On the real MySQL and Redis: an add whose commit succeeded but whose reply
// was lost is not undone in Redis (the API looks the add up first); its
// retry with the same Idempotency-Key adds nothing; Redis equals the row.
// And an end told "503, retry with the same key" gets its 200.
func TestSaleControlsRetried(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MySQL and Redis")
	}
	items := &lostCommitReply{}
	units := &failingAnnounce{}
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		items.Store, units.Store = d.Items.(*store.Store), d.Units.(*stock.Store)
		d.Items, d.Units = items, units
	})
	ctx := context.Background()
	item := h.activeItem(10)
	add := fmt.Sprintf("/api/v1/items/%d/stock", item)
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	expect(t, h.do("POST", buy, h.buyer(1), nil), http.StatusAccepted, "")

	items.drop.Store(true)
	r := h.doKey("POST", add, h.admin, "add-once", `{"add":5}`)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.StockTotal != 15 || v.StockLeft != 14 {
		t.Fatalf("add whose commit reply was lost: %+v, want stock_total 15, stock_left 14", v)
	}
	checkRedisEqualsRow := func(want int64) {
		t.Helper()
		st, err := h.db.ReadItemState(ctx, item)
		if err != nil {
			t.Fatal(err)
		}
		left, err := h.stk.Left(ctx, item)
		if err != nil {
			t.Fatal(err)
		}
		// One live reservation (buyer 1), not deducted.
		if st.Item.StockTotal != want || st.Stock.Stock != want || left != st.Stock.Stock-1 {
			t.Fatalf("stock_total %d, stock row %d, redis %d; want %d, %d, %d", st.Item.StockTotal, st.Stock.Stock, left, want, want, want-1)
		}
	}
	checkRedisEqualsRow(15)

	for range 2 {
		r = h.doKey("POST", add, h.admin, "add-once", `{"add":5}`)
		expect(t, r, http.StatusOK, "")
		if v := itemBody(t, r); v.StockTotal != 15 || r.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("retried add: %+v, replayed %q", v, r.header.Get("Idempotent-Replayed"))
		}
	}
	expectErr(t, h.doKey("POST", add, h.admin, "add-once", `{"add":6}`), http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
	checkRedisEqualsRow(15)
	expect(t, h.doKey("POST", add, h.admin, "add-two", `{"add":2}`), http.StatusOK, "")
	checkRedisEqualsRow(17)

	end := fmt.Sprintf("/api/v1/items/%d/end", item)
	units.fail.Store(true)
	expectErr(t, h.doKey("POST", end, h.admin, "end-a", nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	expectErr(t, h.doKey("POST", end, h.admin, "end-b", nil), http.StatusConflict, "SALE_ENDED")
	r = h.doKey("POST", end, h.admin, "end-a", nil)
	expect(t, r, http.StatusOK, "")
	if it, err := h.db.GetItem(ctx, item); err != nil || it.EndKey == nil || *it.EndKey != "end-a" {
		t.Fatalf("item.end_key after the end: %+v %v", it, err)
	}
	// A retried add of the ended sale still answers its first result.
	expect(t, h.doKey("POST", add, h.admin, "add-two", `{"add":2}`), http.StatusOK, "")
	expectErr(t, h.doKey("POST", add, h.admin, "add-three", `{"add":2}`), http.StatusConflict, "SALE_ENDED")
}
