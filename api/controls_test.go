package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// End and add on the real MySQL and Redis: the database's clock ends the
// sale, a repeat is 409 and changes nothing, an ended sale takes no units.
func TestSaleControls(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MySQL and Redis")
	}
	h := newHarness(t)
	item := h.activeItem(5)
	ctx := context.Background()
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	expect(t, h.do("POST", buy, h.buyer(1), nil), http.StatusAccepted, "")

	r := h.do("POST", fmt.Sprintf("/api/v1/items/%d/stock", item), h.admin, `{"add":7}`)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.StockTotal != 12 || v.StockLeft != 11 {
		t.Fatalf("after add: %+v", v)
	}
	st, err := h.db.ReadItemState(ctx, item)
	if err != nil || st.Stock.Stock != 12 {
		t.Fatalf("stock row %+v %v, want 12", st.Stock, err)
	}

	r = h.do("POST", fmt.Sprintf("/api/v1/items/%d/end", item), h.admin, nil)
	expect(t, r, http.StatusOK, "")
	v := itemBody(t, r)
	it, err := h.db.GetItem(ctx, item)
	if err != nil || v.Status != sale.ItemEnded || !it.EndAt.Equal(v.EndAt) || it.EndAt.After(time.Now().Add(time.Second)) {
		t.Fatalf("ended: view %+v, row %+v (%v)", v, it, err)
	}
	expectErr(t, h.do("POST", buy, h.buyer(2), nil), http.StatusForbidden, "SALE_ENDED")
	expectErr(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/end", item), h.admin, nil), http.StatusConflict, "SALE_ENDED")
	expectErr(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/stock", item), h.admin, `{"add":1}`), http.StatusConflict, "SALE_ENDED")
	if again, _ := h.db.GetItem(ctx, item); !again.EndAt.Equal(it.EndAt) || again.StockTotal != 12 {
		t.Fatalf("a refused end or add changed the item: %+v", again)
	}
	if left, _ := h.stk.Left(ctx, item); left != 11 {
		t.Fatalf("redis stock_left %d, want 11", left)
	}
	expectErr(t, h.do("POST", "/api/v1/items/987654321/end", h.admin, nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	expectErr(t, h.do("POST", "/api/v1/items/987654321/stock", h.admin, `{"add":1}`), http.StatusNotFound, "ITEM_NOT_FOUND")
}

// Units added while buyers stampede, while "sagas" take units from the stock
// row and a recount following the documented lock order rewrites Redis:
// every unit is sold exactly once, to distinct buyers, and MySQL and Redis
// agree at the end.
func TestAddStockDuringStampede(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MySQL and Redis")
	}
	const (
		initial = 40
		adds    = 6
		perAdd  = 10
		total   = initial + adds*perAdd
	)
	h := newHarness(t)
	item := h.activeItem(initial)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var (
		mu       sync.Mutex
		accepted = map[int64]string{} // buyer -> order id
		orders   = make(chan string, 1000)
		next     atomic.Int64
	)
	buyWave := func(buyers int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for range buyers {
			u := next.Add(1)
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(u), nil)
				switch r.status {
				case http.StatusAccepted:
					id := r.json(t)["order_id"].(string)
					mu.Lock()
					if _, dup := accepted[u]; dup {
						t.Errorf("buyer %d got two units", u)
					}
					accepted[u] = id
					mu.Unlock()
					orders <- id
				case http.StatusGone:
				default:
					t.Errorf("buyer %d: %d %s", u, r.status, r.body)
				}
			})
		}
		wg.Wait()
	}

	// The sagas' side: each accepted order is persisted and takes its unit
	// from the stock row (optimistic lock, version checked).
	var sagas sync.WaitGroup
	sagas.Go(func() {
		for id := range orders {
			mu.Lock()
			var o store.Order
			for u, oid := range accepted {
				if oid == id {
					o = store.Order{OrderID: id, UserID: u, ItemID: item}
				}
			}
			mu.Unlock()
			if _, err := h.db.CreateQueuedOrder(ctx, o); err != nil {
				t.Errorf("persist %s: %v", id, err)
				continue
			}
			if _, _, err := h.db.DeductStock(ctx, id, item, time.Hour); err != nil {
				t.Errorf("deduct %s: %v", id, err)
			}
		}
	})
	// A recount in the documented order: the stock row locked, the
	// deductions read in the same transaction, Redis rewritten, commit.
	recounts := atomic.Int64{}
	var recounter sync.WaitGroup
	recounter.Go(func() {
		for ctx.Err() == nil {
			err := h.db.DB().WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				var st store.Stock
				if err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("item_id = ?", item).Take(&st).Error; err != nil {
					return err
				}
				var deducted []string
				if err := tx.Raw("SELECT order_id FROM stock_deduction WHERE item_id = ? AND restored = FALSE", item).
					Scan(&deducted).Error; err != nil {
					return err
				}
				_, _, err := h.stk.Recount(ctx, item, st.Stock, deducted, stock.Set)
				return err
			})
			if err != nil && ctx.Err() == nil {
				t.Errorf("recount: %v", err)
				return
			}
			recounts.Add(1)
			time.Sleep(5 * time.Millisecond)
		}
	})

	var adders sync.WaitGroup
	adders.Go(func() {
		for range adds {
			r := h.do("POST", fmt.Sprintf("/api/v1/items/%d/stock", item), h.admin, fmt.Sprintf(`{"add":%d}`, perAdd))
			if r.status != http.StatusOK {
				t.Errorf("add: %d %s", r.status, r.body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
	buyWave(200) // while the adds land
	adders.Wait()
	buyWave(200) // every unit added is on sale: this wave takes the rest
	close(orders)
	sagas.Wait()
	cancel()
	recounter.Wait()

	bctx := context.Background()
	left, err := h.stk.Left(bctx, item)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := h.stk.ReadItemState(bctx, item)
	if err != nil {
		t.Fatal(err)
	}
	res := rs.Reservations
	marks := len(rs.Marks)
	it, _ := h.db.GetItem(bctx, item)
	state, _ := h.db.ReadItemState(bctx, item)
	st := state.Stock
	t.Logf("sold %d of %d (stock_total %d), redis left %d, reservations %d, marks %d, stock row %d, recounts %d",
		len(accepted), total, it.StockTotal, left, len(res), marks, st.Stock, recounts.Load())
	if len(accepted) != total || it.StockTotal != total || left != 0 || len(res) != total || marks != total || st.Stock != 0 {
		t.Fatalf("oversold or lost units: sold %d, want %d", len(accepted), total)
	}
}

// A buyer's orders on the real stores: QUEUED ones from Redis (marks),
// persisted ones from MySQL, newest first, pages, no one else's.
func TestListOrders(t *testing.T) {
	if testing.Short() {
		t.Skip("needs MySQL and Redis")
	}
	h := newHarness(t)
	ctx := context.Background()
	const buyer, other = 21, 22
	var ids []string
	for i := range 5 {
		item := h.activeItem(3)
		r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(buyer), nil)
		expect(t, r, http.StatusAccepted, "")
		id := r.json(t)["order_id"].(string)
		ids = append([]string{id}, ids...) // newest first
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(other), nil), http.StatusAccepted, "")
		if i%2 == 0 { // persisted by its "saga", with its deadline
			if _, err := h.db.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: buyer, ItemID: item}); err != nil {
				t.Fatal(err)
			}
			row, _, err := h.db.DeductStock(ctx, id, item, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := h.views.PublishStatus(ctx, row.View()); err != nil { // the saga's Notify
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	var got []order.View
	cursor := ""
	for {
		q := "/api/v1/orders?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		r := h.do("GET", q, h.buyer(buyer), nil)
		expect(t, r, http.StatusOK, "")
		var b struct {
			Orders     []order.View `json:"orders"`
			NextCursor *string      `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &b); err != nil {
			t.Fatal(err)
		}
		got = append(got, b.Orders...)
		if b.NextCursor == nil {
			break
		}
		cursor = *b.NextCursor
	}
	if len(got) != len(ids) {
		t.Fatalf("%d orders listed, want %d: %+v", len(got), len(ids), got)
	}
	for i, v := range got {
		persisted := (len(ids)-1-i)%2 == 0
		switch {
		case v.OrderID != ids[i] || v.UserID != buyer:
			t.Fatalf("entry %d: %+v, want order %s", i, v, ids[i])
		case persisted && (v.Status != order.StatusPendingPayment || v.PayBy == nil):
			t.Fatalf("entry %d: persisted order %+v without its deadline", i, v)
		case !persisted && v.Status != order.StatusQueued:
			t.Fatalf("entry %d: %+v, want QUEUED", i, v)
		}
		// The same view as GET /api/v1/orders/:id.
		one := h.do("GET", "/api/v1/orders/"+v.OrderID, h.buyer(buyer), nil)
		var gv order.View
		_ = json.Unmarshal(one.body, &gv)
		if gv.Status != v.Status || gv.OrderID != v.OrderID {
			t.Fatalf("entry %d: list %+v, GET %+v", i, v, gv)
		}
	}
}
