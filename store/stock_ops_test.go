package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

func newItem(t *testing.T, st *store.Store, units int64) store.Item {
	t.Helper()
	it, err := st.CreateItem(context.Background(), store.Item{Name: "x", PriceCents: 1, StockTotal: units,
		StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	return it
}

// 40 orders race for 10 units on the hot row: exactly 10 deduct, the others
// see the row exhausted (or, rarely, run out of optimistic attempts), and the
// row never goes below zero.
func TestDeductStockRaceNeverOversells(t *testing.T) {
	t.Parallel()
	st, _ := testenv.MySQL(t)
	it := newItem(t, st, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var deducted, exhausted, conflict int
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := st.DeductStock(context.Background(), fmt.Sprintf("order-%02d", i), it.ID, store.DefaultDeductAttempts)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && ok:
				deducted++
			case errors.Is(err, store.ErrStockExhausted):
				exhausted++
			case errors.Is(err, store.ErrVersionConflict):
				conflict++
			default:
				t.Errorf("deduct: %v %v", ok, err)
			}
		}()
	}
	wg.Wait()
	s, _ := st.GetStock(context.Background(), it.ID)
	if deducted != 10 || s.Stock != 0 || s.Version != 10 {
		t.Fatalf("deducted %d (exhausted %d, conflict %d), row %+v; want 10 and stock 0 version 10", deducted, exhausted, conflict, s)
	}
	var markers int64
	st.DB().Model(&store.StockDeduction{}).Where("item_id = ?", it.ID).Count(&markers)
	if markers != 10 {
		t.Fatalf("%d deduction markers, want 10", markers)
	}
}

func TestDeductAndRestoreAreIdempotentPerOrder(t *testing.T) {
	t.Parallel()
	st, _ := testenv.MySQL(t)
	ctx := context.Background()
	it := newItem(t, st, 1)
	if ok, err := st.DeductStock(ctx, "o1", it.ID, 0); err != nil || !ok {
		t.Fatalf("first deduct %v %v", ok, err)
	}
	// A retry after a lost reply, with the row now at zero, is still success.
	if ok, err := st.DeductStock(ctx, "o1", it.ID, 0); err != nil || ok {
		t.Fatalf("retried deduct %v %v, want already deducted", ok, err)
	}
	if _, err := st.DeductStock(ctx, "o2", it.ID, 0); !errors.Is(err, store.ErrStockExhausted) {
		t.Fatalf("other order: %v, want exhausted", err)
	}
	for i, want := range []bool{true, false, false} {
		if ok, err := st.RestoreStock(ctx, "o1"); err != nil || ok != want {
			t.Fatalf("restore #%d: %v %v, want %v", i, ok, err, want)
		}
	}
	if ok, err := st.RestoreStock(ctx, "never-deducted"); err != nil || ok {
		t.Fatalf("restore without marker: %v %v", ok, err)
	}
	s, _ := st.GetStock(ctx, it.ID)
	if s.Stock != 1 || s.Version != 2 {
		t.Fatalf("row %+v, want stock 1 version 2", s)
	}
	// Restored, a retried deduct of the same order must not take it again.
	if ok, err := st.DeductStock(ctx, "o1", it.ID, 0); err != nil || ok {
		t.Fatalf("deduct after restore: %v %v", ok, err)
	}
	if s, _ := st.GetStock(ctx, it.ID); s.Stock != 1 {
		t.Fatalf("row %+v", s)
	}
}

func TestOrderWritesAreIdempotent(t *testing.T) {
	t.Parallel()
	st, _ := testenv.MySQL(t)
	ctx := context.Background()
	o := store.Order{OrderID: "A1", UserID: 1, ItemID: 7}
	if r, err := st.CreatePendingOrder(ctx, o); err != nil || r.Status != order.StatusPendingPayment {
		t.Fatalf("create %+v %v", r, err)
	}
	if r, err := st.CreatePendingOrder(ctx, o); err != nil || r.Status != order.StatusPendingPayment {
		t.Fatalf("create again %+v %v", r, err)
	}
	if _, err := st.CreatePendingOrder(ctx, store.Order{OrderID: "A2", UserID: 1, ItemID: 7}); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("second order of the buyer: %v", err)
	}
	if r, err := st.SetOrderPaid(ctx, "A1"); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("paid %+v %v", r, err)
	}
	if r, err := st.SetOrderPaid(ctx, "A1"); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("paid again %+v %v", r, err)
	}
	// A paid order is final: closing it changes nothing.
	if r, _, err := st.CloseOrder(ctx, o, order.StatusCancelled, "PAYMENT_TIMEOUT"); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("close paid %+v %v", r, err)
	}
	// Close inserts a missing row, and cannot record one whose buyer slot is taken.
	if r, rec, err := st.CloseOrder(ctx, store.Order{OrderID: "B1", UserID: 2, ItemID: 7}, order.StatusFailed, "X"); err != nil || !rec || r.Status != order.StatusFailed {
		t.Fatalf("close missing %+v %v %v", r, rec, err)
	}
	if _, rec, err := st.CloseOrder(ctx, store.Order{OrderID: "B2", UserID: 2, ItemID: 7}, order.StatusFailed, "X"); err != nil || rec {
		t.Fatalf("close unrecordable %v %v", rec, err)
	}
	// Dead letters: first writer wins.
	if _, out, err := st.FailUnstartedOrder(ctx, store.Order{OrderID: "C1", UserID: 3, ItemID: 7}, "DLQ"); err != nil || out != store.FailRecorded {
		t.Fatalf("fail unstarted %v %v", out, err)
	}
	if _, out, err := st.FailUnstartedOrder(ctx, store.Order{OrderID: "C1", UserID: 3, ItemID: 7}, "DLQ"); err != nil || out != store.FailAlreadyFailed {
		t.Fatalf("fail unstarted again %v %v", out, err)
	}
	if _, out, err := st.FailUnstartedOrder(ctx, o, "DLQ"); err != nil || out != store.FailOwnedBySaga {
		t.Fatalf("fail a saga's order %v %v", out, err)
	}
	if r, err := st.CreatePendingOrder(ctx, store.Order{OrderID: "C1", UserID: 3, ItemID: 7}); err != nil || r.Status != order.StatusFailed {
		t.Fatalf("late saga sees %+v %v, want the FAILED row", r, err)
	}
}
