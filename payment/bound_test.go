package payment_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// A pay received before pay_by whose UPDATE stalls (the row locked by a long
// transaction, MySQL slow) is answered before the saga may close the order
// (pay_by + order.PayGrace): recorded, or "not recorded in time" (HTTP 503),
// never refused because the close won while it waited.
func TestPayStalledPastTheGraceIsNotRefused(t *testing.T) {
	st, _ := testkit.MySQL(t)
	ctx := context.Background()
	now := time.Now().UTC()
	it, err := st.CreateItem(ctx, store.Item{Name: "bound", PriceCents: 1, StockTotal: 1,
		StartAt: now.Add(-time.Minute), EndAt: now.Add(time.Hour), PaymentTimeoutSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	id := order.NewID()
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: 7, ItemID: it.ID}); err != nil {
		t.Fatal(err)
	}
	row, _, err := st.DeductStock(ctx, id, it.ID, time.Second)
	if err != nil || row.PayBy == nil {
		t.Fatalf("deduct: %v (%+v)", err, row)
	}

	// A transaction holds the order row: the pay's UPDATE waits on it.
	tx := st.DB().Begin()
	defer func() { _ = tx.Rollback().Error }()
	if err := tx.Exec("SELECT id FROM seckill_order WHERE order_id = ? FOR UPDATE", id).Error; err != nil {
		t.Fatal(err)
	}
	d, err := payment.New(st, &fakeStatuses{}, &fakeRedis{}, &fakeRedis{}, func() (payment.Sagas, error) { return &fakeSagas{signals: make(chan string, 4)}, nil },
		&count{}, payment.Options{WakeRate: 1000}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		v   order.View
		err error
	}
	paid := make(chan result, 1)
	receivedAt := time.Now()
	if !receivedAt.Before(*row.PayBy) {
		t.Skipf("the deadline passed before the pay was sent (pay_by %s)", row.PayBy)
	}
	go func() {
		v, err := d.Pay(ctx, id, 7, receivedAt)
		paid <- result{v, err}
	}()
	var r result
	select {
	case r = <-paid:
	case <-time.After(time.Until(row.PayBy.Add(order.PayGrace))):
		// The pay has not answered when the saga's timeout close is due:
		// the close (CloseOrder's decision, under the same row lock) wins.
		if err := tx.Exec("UPDATE seckill_order SET status = ?, reason = ? WHERE order_id = ?",
			order.StatusCancelled, order.ReasonPaymentTimeout, id).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		r = <-paid
		t.Fatalf("the pay was still waiting when the order was closed; it answered %+v, %v", r.v, r.err)
	}
	if !errors.Is(r.err, payment.ErrNotRecorded) {
		t.Fatalf("stalled pay answered %+v, %v; want payment.ErrNotRecorded", r.v, r.err)
	}
	_ = tx.Rollback().Error
	// Nothing was decided against the buyer: the order is still open, or
	// PAID if the stalled statement landed after all.
	got, err := st.FindOrder(ctx, id)
	if err != nil || got.Status != order.StatusPendingPayment && got.Status != order.StatusPaid {
		t.Fatalf("after the stalled pay: %+v, %v", got, err)
	}
}
