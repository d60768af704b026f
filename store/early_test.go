package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

func message(orderID string, userID, itemID int64, payBy time.Time) order.Message {
	return order.Message{OrderID: orderID, UserID: userID, ItemID: itemID, ReservedAt: payBy.Add(-time.Minute), PayBy: &payBy}
}

// A pay at the door while the order is QUEUED records paid_at on a QUEUED
// row; only the deduction's transaction makes it PAID, and a close of such a
// row refunds it. A cancel while QUEUED closes the row before the saga can
// take a unit. A row held by another order is never touched.
func TestEarlyPaymentNeverClaimsAUnit(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)

	// E1: paid before its saga ran; the saga then finds the row and takes the unit.
	m1 := message("E1", 20, it.ID, payBy)
	rows, err := st.InsertEarly(ctx, []store.Early{{M: m1, ReceivedAt: now, Pay: true}})
	if err != nil || rows[0].Status != order.StatusQueued || rows[0].PaidAt == nil {
		t.Fatalf("early pay %+v %v", rows, err)
	}
	r := rows[0]
	if v := r.View(); v.Status != order.StatusPaid || !v.Settling || v.PayBy == nil || !v.PayBy.Equal(payBy.UTC().Truncate(time.Millisecond)) {
		t.Fatalf("view of a paid QUEUED row %+v", v)
	}
	// Again: the INSERT meets the row, the door's update finds it paid.
	if _, err := st.InsertEarly(ctx, []store.Early{{M: m1, ReceivedAt: now, Pay: true}}); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("early pay again: %v", err)
	}
	if _, changed, err := st.RecordPayment(ctx, "E1", 20, now, true); err != nil || changed {
		t.Fatalf("pay again: %v %v", changed, err)
	}
	if _, _, err := st.RecordCancel(ctx, "E1", 20, now, true); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("cancel of a paid order: %v", err)
	}
	if row, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "E1", UserID: 20, ItemID: it.ID, PayBy: m1.PayBy}); err != nil || !row.PaidQueued() {
		t.Fatalf("PersistOrder after the door %+v %v", row, err)
	}
	row, deducted, err := st.DeductStock(ctx, "E1", it.ID, time.Minute)
	if err != nil || !deducted || row.Status != order.StatusPaid || row.View().Settling {
		t.Fatalf("deduct of a paid QUEUED order %+v %v %v", row, deducted, err)
	}

	// E2: the saga persisted first; the door's pay needs the switch.
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: "E2", UserID: 21, ItemID: it.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.RecordPayment(ctx, "E2", 21, now, false); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("pay of a QUEUED order with early payment off: %v", err)
	}
	if r, changed, err := st.RecordPayment(ctx, "E2", 21, now, true); err != nil || !changed || !r.PaidQueued() {
		t.Fatalf("pay of a QUEUED row %+v %v %v", r, changed, err)
	}
	// The stock row has no unit for it (a phantom): the close refunds it.
	res, err := st.CloseOrder(ctx, store.Order{OrderID: "E2", UserID: 21, ItemID: it.ID},
		store.Closing{Status: order.StatusFailed, Reason: order.ReasonStockExhausted})
	if err != nil || res.Order.Status != order.StatusRefunded || !res.Refunded || res.Restored {
		t.Fatalf("close of a paid QUEUED order %+v %v", res, err)
	}
	if res, err := st.CloseOrder(ctx, store.Order{OrderID: "E2", UserID: 21, ItemID: it.ID},
		store.Closing{Status: order.StatusFailed, Reason: order.ReasonStockExhausted}); err != nil || res.Refunded || res.Order.Status != order.StatusRefunded {
		t.Fatalf("close again %+v %v", res, err)
	}

	// E3: cancelled before its saga ran: the saga cannot take a unit.
	if rows, err := st.InsertEarly(ctx, []store.Early{{M: message("E3", 22, it.ID, payBy), ReceivedAt: now}}); err != nil || rows[0].Status != order.StatusCancelled {
		t.Fatalf("early cancel %+v %v", rows, err)
	}
	if _, _, err := st.DeductStock(ctx, "E3", it.ID, time.Minute); !errors.Is(err, store.ErrOrderClosed) {
		t.Fatalf("deduct of a cancelled order: %v", err)
	}

	// E4: received after its deadline: nothing written.
	if _, err := st.InsertEarly(ctx, []store.Early{{M: message("E4", 23, it.ID, now), ReceivedAt: now, Pay: true}}); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("late early pay: %v", err)
	}
	if _, err := st.FindOrder(ctx, "E4"); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("row of a late pay: %v", err)
	}

	// The buyer's (user_id, item_id) is held by E1: an order id claiming the
	// same buyer neither writes a row nor touches E1's, and neither does any
	// other decision of its INSERT (all or none).
	if _, err := st.InsertEarly(ctx, []store.Early{{M: message("E6", 24, it.ID, payBy), ReceivedAt: now, Pay: true},
		{M: message("E5", 20, it.ID, payBy), ReceivedAt: now}}); !errors.Is(err, store.ErrDuplicate) {
		t.Fatalf("early cancel of an order whose buyer holds another: %v", err)
	}
	for _, id := range []string{"E5", "E6"} {
		if _, err := st.FindOrder(ctx, id); !errors.Is(err, order.ErrNotFound) {
			t.Fatalf("row of %s: %v", id, err)
		}
	}
	if r, _ := st.FindOrder(ctx, "E1"); r.Status != order.StatusPaid {
		t.Fatalf("E1 touched: %+v", r)
	}
	if s := rowOf(st, it.ID); s.Stock != 2 {
		t.Fatalf("stock row %+v, want 2 (E1 took one)", s)
	}
}

// Door pays race the sagas' deductions of the same orders: whichever lands
// first, every order ends PAID with exactly one stock-row unit, and no row is
// PAID without one or PENDING_PAYMENT with a payment.
func TestEarlyPaymentRacingTheDeduction(t *testing.T) {
	const n = 20
	st, it := newSale(t, n)
	ctx := context.Background()
	payBy := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for i := range n {
		id, user := fmt.Sprintf("R%02d", i), int64(100+i)
		if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: user, ItemID: it.ID, PayBy: &payBy}); err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			if _, _, err := st.RecordPayment(ctx, id, user, time.Now(), true); err != nil {
				t.Errorf("pay %s: %v", id, err)
			}
		})
		wg.Go(func() {
			if _, _, err := st.DeductStock(ctx, id, it.ID, time.Minute); err != nil {
				t.Errorf("deduct %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	var bad int64
	if err := st.DB().Raw(`SELECT COUNT(*) FROM seckill_order o LEFT JOIN stock_deduction d ON d.order_id = o.order_id
		WHERE o.item_id = ? AND (o.status <> 'PAID' OR o.paid_at IS NULL OR d.order_id IS NULL)`, it.ID).Scan(&bad).Error; err != nil {
		t.Fatal(err)
	}
	if s := rowOf(st, it.ID); bad != 0 || s.Stock != 0 {
		t.Fatalf("%d orders not PAID with a unit; stock row %+v", bad, s)
	}
}
