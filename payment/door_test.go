package payment_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// Winners paying at once against the real stores, their pays sharing
// batches: every order reserved with a deadline is paid, its row QUEUED
// with paid_at, its view PAID settling. Among them, an order whose saga
// wrote its row meanwhile (its view still QUEUED) is paid on that row, and
// one whose buyer already holds another order's row for the item is refused
// without a row; neither keeps the others of its batch from being written.
// A forged order id and another buyer's order write nothing.
func TestEarlyPaysAtOnce(t *testing.T) {
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	const n = 60
	it, err := st.CreateItem(ctx, store.Item{Name: "door", PriceCents: 1, StockTotal: n, StartAt: time.Now().Add(-time.Minute),
		EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	units, views := stock.New(rdb, prefix), orderstatus.New(rdb, prefix)
	if _, err := units.Load(ctx, it.ID, n); err != nil {
		t.Fatal(err)
	}
	payBy := order.Deadline(time.Now(), 600)
	ms := make([]order.Message, n)
	for i := range ms {
		ms[i] = order.Message{OrderID: order.NewID(), ItemID: it.ID, UserID: int64(500 + i), ReservedAt: time.Now().UTC(), PayBy: &payBy}
		if _, err := units.Reserve(ctx, ms[i]); err != nil {
			t.Fatal(err)
		}
	}
	// ms[0]'s saga persisted it; ms[1]'s buyer holds another order's row.
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: ms[0].OrderID, UserID: ms[0].UserID, ItemID: it.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: order.NewID(), UserID: ms[1].UserID, ItemID: it.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	d, err := payment.New(st, views, views, units, func() (payment.Sagas, error) { return &fakeSagas{signals: make(chan string, n)}, nil },
		&count{}, payment.Options{WakeRate: 1000}, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}

	errs := make([]error, n+2)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() { _, errs[i] = d.Pay(ctx, m.OrderID, m.UserID, time.Now()) })
	}
	forged := order.NewID()
	wg.Go(func() { _, errs[n] = d.Pay(ctx, forged, 7, time.Now()) })
	wg.Go(func() { _, errs[n+1] = d.Pay(ctx, ms[2].OrderID, 8, time.Now()) })
	wg.Wait()
	for i, want := range map[int]error{1: order.ErrNotPayable, n: order.ErrNotFound, n + 1: order.ErrNotFound} {
		if !errors.Is(errs[i], want) {
			t.Fatalf("pay %d: %v, want %v", i, errs[i], want)
		}
		errs[i] = nil
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		row, err := st.FindOrder(ctx, m.OrderID)
		v, _, verr := views.Status(ctx, m.OrderID)
		switch {
		case i == 1:
			if !errors.Is(err, order.ErrNotFound) {
				t.Fatalf("row of the buyer holding another order: %+v %v", row, err)
			}
		case err != nil || verr != nil || !row.PaidQueued() || v.Status != order.StatusPaid || !v.Settling:
			t.Fatalf("order %d: row %+v %v, view %+v %v", i, row, err, v, verr)
		}
	}
	if _, err := st.FindOrder(ctx, forged); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("row of a forged order id: %v", err)
	}
	var rows int64
	if err := st.DB().Raw("SELECT COUNT(*) FROM seckill_order WHERE item_id = ?", it.ID).Scan(&rows).Error; err != nil || rows != n {
		t.Fatalf("%d rows (%v), want %d", rows, err, n)
	}
}
