package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
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

// newSale is a test's own database with one item of units on sale.
func newSale(t *testing.T, units int64) (*store.Store, store.Item) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	return st, newItem(t, st, units)
}

// rowOf reads the item's stock row.
func rowOf(st *store.Store, itemID int64) store.Stock {
	s, _ := st.ReadItemState(context.Background(), itemID)
	return s.Stock
}

// queued records an order as the saga's PersistOrder does.
func queued(t *testing.T, st *store.Store, orderID string, userID, itemID int64) {
	t.Helper()
	if _, err := st.CreateQueuedOrder(context.Background(), store.Order{OrderID: orderID, UserID: userID, ItemID: itemID}); err != nil {
		t.Fatal(err)
	}
}

// 40 orders race for 10 units on the hot row: exactly 10 deduct, the others
// see the row exhausted (or, rarely, run out of optimistic attempts), and the
// row never goes below zero.
func TestDeductStockRaceNeverOversells(t *testing.T) {
	t.Parallel()
	st, cfg := testkit.MySQL(t)
	// A second pool stands for another worker process: its writers take
	// turns with st's only through the optimistic version check.
	other, err := store.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	it := newItem(t, st, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var deducted, exhausted, conflict int
	for i := range 40 {
		queued(t, st, fmt.Sprintf("order-%02d", i), int64(i+1), it.ID)
	}
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pool := st
			if i%2 == 1 {
				pool = other
			}
			_, ok, err := pool.DeductStock(context.Background(), fmt.Sprintf("order-%02d", i), it.ID, time.Minute)
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
	s := rowOf(st, it.ID)
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
	st, it := newSale(t, 1)
	ctx := context.Background()
	queued(t, st, "o1", 1, it.ID)
	queued(t, st, "o2", 2, it.ID)
	row, ok, err := st.DeductStock(ctx, "o1", it.ID, time.Minute)
	if err != nil || !ok || row.Status != order.StatusPendingPayment || row.PayBy == nil {
		t.Fatalf("first deduct %+v %v %v", row, ok, err)
	}
	payBy := *row.PayBy
	// A retry after a lost reply, with the row now at zero, is still success
	// and keeps the deadline.
	if row, ok, err := st.DeductStock(ctx, "o1", it.ID, time.Minute); err != nil || ok || !row.PayBy.Equal(payBy) {
		t.Fatalf("retried deduct %+v %v %v, want already deducted", row, ok, err)
	}
	if _, _, err := st.DeductStock(ctx, "o2", it.ID, time.Minute); !errors.Is(err, store.ErrStockExhausted) {
		t.Fatalf("other order: %v, want exhausted", err)
	}
	closing := store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}
	for i, want := range []bool{true, false, false} {
		if res, err := st.CloseOrder(ctx, store.Order{OrderID: "o1", UserID: 1, ItemID: it.ID}, closing); err != nil || res.Restored != want {
			t.Fatalf("close #%d: %+v %v, want restored %v", i, res, err, want)
		}
	}
	if res, err := st.CloseOrder(ctx, store.Order{OrderID: "never-deducted", UserID: 3, ItemID: it.ID}, closing); err != nil || res.Restored {
		t.Fatalf("close without marker: %+v %v", res, err)
	}
	s := rowOf(st, it.ID)
	if s.Stock != 1 || s.Version != 2 {
		t.Fatalf("row %+v, want stock 1 version 2", s)
	}
	// Restored, a retried deduct of the same order must not take it again.
	if _, ok, err := st.DeductStock(ctx, "o1", it.ID, time.Minute); !errors.Is(err, store.ErrOrderClosed) && (err != nil || ok) {
		t.Fatalf("deduct after restore: %v %v", ok, err)
	}
	if s := rowOf(st, it.ID); s.Stock != 1 {
		t.Fatalf("row %+v", s)
	}
}

func TestOrderWritesAreIdempotent(t *testing.T) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	ctx := context.Background()
	o := store.Order{OrderID: "A1", UserID: 1, ItemID: 7}
	if r, err := st.CreateQueuedOrder(ctx, o); err != nil || r.Status != order.StatusQueued {
		t.Fatalf("create %+v %v", r, err)
	}
	if r, err := st.CreateQueuedOrder(ctx, o); err != nil || r.Status != order.StatusQueued {
		t.Fatalf("create again %+v %v", r, err)
	}
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "A2", UserID: 1, ItemID: 7}); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("second order of the buyer: %v", err)
	}
	// MarkPaid's read pays nothing: a QUEUED or PENDING_PAYMENT row is not payable by a signal.
	if _, err := st.ConfirmPaid(ctx, "A1"); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("confirm a QUEUED order: %v", err)
	}
	st.DB().Exec("UPDATE seckill_order SET status = 'PENDING_PAYMENT', pay_by = NOW(3) + INTERVAL 1 MINUTE WHERE order_id = 'A1'")
	if r, err := st.ConfirmPaid(ctx, "A1"); !errors.Is(err, order.ErrNotPayable) || r.Status != order.StatusPendingPayment {
		t.Fatalf("confirm a PENDING_PAYMENT order: %+v %v", r, err)
	}
	if _, _, err := st.RecordPayment(ctx, "A1", 1, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	if r, err := st.ConfirmPaid(ctx, "A1"); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("confirm paid %+v %v", r, err)
	}
	// A paid order is final: closing it changes nothing and gives nothing back.
	res, err := st.CloseOrder(ctx, o, store.Closing{Status: order.StatusCancelled, Reason: "PAYMENT_TIMEOUT"})
	if err != nil || res.Order.Status != order.StatusPaid || res.Restored {
		t.Fatalf("close paid %+v %v", res, err)
	}
	// Close inserts a missing row, and cannot record one whose buyer slot is taken.
	if res, err := st.CloseOrder(ctx, store.Order{OrderID: "B1", UserID: 2, ItemID: 7}, store.Closing{Status: order.StatusFailed, Reason: "X"}); err != nil || !res.Recorded || res.Order.Status != order.StatusFailed {
		t.Fatalf("close missing %+v %v", res, err)
	}
	if res, err := st.CloseOrder(ctx, store.Order{OrderID: "B2", UserID: 2, ItemID: 7}, store.Closing{Status: order.StatusFailed, Reason: "X"}); err != nil || res.Recorded {
		t.Fatalf("close unrecordable %+v %v", res, err)
	}
	// A late PersistOrder sees the final row.
	if r, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "B1", UserID: 2, ItemID: 7}); err != nil || r.Status != order.StatusFailed {
		t.Fatalf("late saga sees %+v %v, want the FAILED row", r, err)
	}
}

// The door and the saga's close meet on the order row: a payment recorded in
// time wins over the timeout close, and the close restores the stock-row unit
// exactly once; a timeout close before the deadline plus grace is refused.
func TestPaymentAtTheDoorAndClose(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	for i, id := range []string{"P1", "P2", "P3"} {
		queued(t, st, id, int64(10+i), it.ID)
		if _, _, err := st.DeductStock(ctx, id, it.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	// P1 paid in time; another buyer cannot pay it; a late pay is refused.
	if r, _, err := st.RecordPayment(ctx, "P1", 11, now, false); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("pay by another buyer %+v %v", r, err)
	}
	if r, _, err := st.RecordPayment(ctx, "P1", 10, now, false); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("pay %+v %v", r, err)
	}
	if r, _, err := st.RecordPayment(ctx, "P1", 10, now, false); err != nil || r.Status != order.StatusPaid {
		t.Fatalf("pay again %+v %v", r, err)
	}
	if r, _, err := st.RecordPayment(ctx, "P2", 11, now.Add(2*time.Minute), false); !errors.Is(err, order.ErrNotPayable) || r.Status != order.StatusPendingPayment {
		t.Fatalf("late pay %+v %v", r, err)
	}
	// Timeout closes: refused before the deadline plus grace; P1 stays PAID.
	timeout := store.Closing{Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout, AfterDeadline: order.PayGrace}
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "P2", UserID: 11, ItemID: it.ID}, timeout); !errors.Is(err, store.ErrNotDue) {
		t.Fatalf("early timeout close: %v, want ErrNotDue", err)
	}
	if res, err := st.CloseOrder(ctx, store.Order{OrderID: "P1", UserID: 10, ItemID: it.ID}, timeout); err != nil || res.Order.Status != order.StatusPaid || res.Restored {
		t.Fatalf("close of a paid order %+v %v", res, err)
	}
	// P3 cancelled at the door; the saga's close then restores its unit once.
	if r, _, err := st.RecordCancel(ctx, "P3", 12, now, false); err != nil || r.Status != order.StatusCancelled || r.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("cancel %+v %v", r, err)
	}
	if _, _, err := st.RecordCancel(ctx, "P3", 12, now, false); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("cancel twice: %v", err)
	}
	if _, _, err := st.RecordPayment(ctx, "P3", 12, now, false); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("pay a cancelled order: %v", err)
	}
	for i, want := range []bool{true, false} {
		res, err := st.CloseOrder(ctx, store.Order{OrderID: "P3", UserID: 12, ItemID: it.ID}, store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled})
		if err != nil || res.Order.Status != order.StatusCancelled || res.Restored != want {
			t.Fatalf("close #%d %+v %v", i, res, err)
		}
	}
	if s := rowOf(st, it.ID); s.Stock != 1 {
		t.Fatalf("stock row %+v, want 1 (P1 paid, P2 pending, P3 restored)", s)
	}
	// A closed order cannot take a unit: the decrement is rolled back.
	queued(t, st, "P4", 13, it.ID)
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "P4", UserID: 13, ItemID: it.ID}, store.Closing{Status: order.StatusFailed, Reason: "X"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeductStock(ctx, "P4", it.ID, time.Minute); !errors.Is(err, store.ErrOrderClosed) {
		t.Fatalf("deduct of a closed order: %v", err)
	}
	if s := rowOf(st, it.ID); s.Stock != 1 {
		t.Fatalf("stock row %+v after a refused deduct, want 1", s)
	}
}

// A close racing the saga's own late insert of the row never leaves the row
// open: either the close finds (and closes) the row, or the insert finds the
// closed one. Deadlocks between the two are retried, as the activities are.
func TestCloseRacingALateInsertLeavesNoOpenRow(t *testing.T) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	ctx := context.Background()
	retry := func(f func() error) error {
		var err error
		for range 20 {
			if err = f(); err == nil || !strings.Contains(err.Error(), "Deadlock") {
				return err
			}
		}
		return err
	}
	var wg sync.WaitGroup
	for i := range 60 {
		o := store.Order{OrderID: fmt.Sprintf("R%02d", i), UserID: int64(100 + i), ItemID: 9}
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := retry(func() error { _, err := st.CreateQueuedOrder(ctx, o); return err }); err != nil {
				t.Errorf("insert %s: %v", o.OrderID, err)
			}
		}()
		go func() {
			defer wg.Done()
			err := retry(func() error {
				res, err := st.CloseOrder(ctx, o, store.Closing{Status: order.StatusFailed, Reason: "X"})
				if err == nil && !res.Recorded {
					return fmt.Errorf("close of %s not recorded", o.OrderID)
				}
				return err
			})
			if err != nil {
				t.Errorf("close %s: %v", o.OrderID, err)
			}
		}()
	}
	wg.Wait()
	var open int64
	st.DB().Model(&store.Order{}).Where("item_id = 9 AND status <> ?", order.StatusFailed).Count(&open)
	if open != 0 {
		t.Fatalf("%d rows left open after racing closes", open)
	}
}
