package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// eventsOf decodes the order's outbox rows, by seq.
func eventsOf(t *testing.T, st *store.Store, orderID string) []order.Event {
	t.Helper()
	var rows []store.OrderEvent
	if err := st.DB().Where("order_id = ?", orderID).Order("seq").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	out := make([]order.Event, len(rows))
	for i, r := range rows {
		e, err := order.DecodeEvent([]byte(r.Payload))
		if err != nil || e.EventID != r.EventID || e.Seq != r.Seq || e.Status != r.Status || e.Seq != i+1 {
			t.Fatalf("order %s: row %+v decodes to %+v %v", orderID, r, e, err)
		}
		out[i] = e
	}
	return out
}

// wantEvents checks the order's events are of statuses, in this order.
func wantEvents(t *testing.T, st *store.Store, orderID string, statuses ...order.Status) []order.Event {
	t.Helper()
	evs := eventsOf(t, st, orderID)
	if len(evs) != len(statuses) {
		t.Fatalf("order %s: %d events %+v, want %v", orderID, len(evs), evs, statuses)
	}
	for i, e := range evs {
		if e.Status != statuses[i] || e.OrderID != orderID || e.OccurredAt.IsZero() {
			t.Fatalf("order %s: event %d is %+v, want %s", orderID, i, e, statuses[i])
		}
	}
	return evs
}

// Every writer of a settled status adds exactly one event per change, in the
// change's transaction, and none when it is retried or finds the change made.
func TestEveryChangeAddsOneEvent(t *testing.T) {
	st, it := newSale(t, 20)
	ctx := context.Background()
	now := time.Now()
	payBy := now.Add(time.Minute)
	twice := func(name string, f func() error) {
		t.Helper()
		for i := range 2 {
			if err := f(); err != nil && i == 0 {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	pending := func(orderID string, userID int64) {
		t.Helper()
		queued(t, st, orderID, userID, it.ID)
		if _, _, err := st.DeductStock(ctx, orderID, it.ID, time.Minute); err != nil {
			t.Fatal(err)
		}
		wantEvents(t, st, orderID) // QUEUED and PENDING_PAYMENT are not announced
	}
	closing := store.Closing{Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout}

	pending("MARKPAID", 1)
	twice("RecordPayment", func() error { _, _, err := st.RecordPayment(ctx, "MARKPAID", 1, now, false); return err })
	e := wantEvents(t, st, "MARKPAID", order.StatusPaid)[0]
	if e.BuyerID != 1 || e.ItemID != it.ID || e.AmountMinor != it.PriceCents || e.Currency != "EUR" || e.PaymentID != "" || e.EventID != "MARKPAID:PAID" {
		t.Fatalf("event of a pay without provider %+v", e)
	}

	pending("DOORPAY", 2)
	twice("RecordPayment", func() error { _, _, err := st.RecordPayment(ctx, "DOORPAY", 2, now, true); return err })
	wantEvents(t, st, "DOORPAY", order.StatusPaid)

	pending("DOORCANCEL", 3)
	twice("RecordCancel", func() error { _, _, err := st.RecordCancel(ctx, "DOORCANCEL", 3, now, true); return err })
	wantEvents(t, st, "DOORCANCEL", order.StatusCancelled)

	early := func(orderID string, userID int64, pay bool) error {
		_, err := st.InsertEarly(ctx, []store.Early{{M: message(orderID, userID, it.ID, payBy), ReceivedAt: now, Pay: pay}})
		return err
	}
	twice("InsertEarly cancel", func() error { return early("EARLYCANCEL", 4, false) })
	wantEvents(t, st, "EARLYCANCEL", order.StatusCancelled)

	// Paid while QUEUED: announced when the deduction makes it PAID.
	twice("InsertEarly pay", func() error { return early("EARLYPAY", 5, true) })
	wantEvents(t, st, "EARLYPAY")
	twice("DeductStock", func() error { _, _, err := st.DeductStock(ctx, "EARLYPAY", it.ID, time.Minute); return err })
	wantEvents(t, st, "EARLYPAY", order.StatusPaid)

	// ... or when its close refunds it.
	if err := early("EARLYREFUND", 6, true); err != nil {
		t.Fatal(err)
	}
	twice("CloseOrder paid while QUEUED", func() error {
		_, err := st.CloseOrder(ctx, store.Order{OrderID: "EARLYREFUND", UserID: 6, ItemID: it.ID}, closing)
		return err
	})
	wantEvents(t, st, "EARLYREFUND", order.StatusRefunded)

	pending("CLOSE", 7)
	twice("CloseOrder", func() error {
		_, err := st.CloseOrder(ctx, store.Order{OrderID: "CLOSE", UserID: 7, ItemID: it.ID}, closing)
		return err
	})
	if e := wantEvents(t, st, "CLOSE", order.StatusCancelled)[0]; e.Reason != order.ReasonPaymentTimeout {
		t.Fatalf("close event %+v", e)
	}
	failed := store.Closing{Status: order.StatusFailed, Reason: "boom"}
	twice("CloseOrder of a missing row", func() error {
		_, err := st.CloseOrder(ctx, store.Order{OrderID: "NOROW", UserID: 8, ItemID: it.ID}, failed)
		return err
	})
	wantEvents(t, st, "NOROW", order.StatusFailed)

	// A provider's notification pays once: its resend and a second event of the payment add nothing.
	pendingOrder(t, st, it.ID, "PROVIDER", 9, payBy, "pi_ev")
	apply(t, st, succeeded("evt_a", "pi_ev", now), store.VerdictPaid)
	apply(t, st, succeeded("evt_a", "pi_ev", now), store.VerdictRepeated)
	apply(t, st, succeeded("evt_b", "pi_ev", now), store.VerdictAlreadyPaid)
	if e := wantEvents(t, st, "PROVIDER", order.StatusPaid)[0]; e.PaymentID != "pi_ev" || e.AmountMinor != 100 || e.Currency != "EUR" {
		t.Fatalf("provider pay event %+v", e)
	}

	// Paid in a group-committed batch: one event each, none for the batch's repeat.
	pendingOrder(t, st, it.ID, "BATCH1", 11, payBy, "pi_b1")
	pendingOrder(t, st, it.ID, "BATCH2", 12, payBy, "pi_b2")
	if _, err := st.ApplyPaymentEvents(ctx, []store.PaymentEvent{succeeded("evt_b1", "pi_b1", now),
		succeeded("evt_b2", "pi_b2", now), succeeded("evt_b1", "pi_b1", now)}); err != nil {
		t.Fatal(err)
	}
	wantEvents(t, st, "BATCH1", order.StatusPaid)
	wantEvents(t, st, "BATCH2", order.StatusPaid)

	// Support's refund of a PAID order's own payment: REFUNDED, once.
	pb1, err := st.OrderPayment(ctx, "BATCH1", "testpay")
	if err != nil {
		t.Fatal(err)
	}
	rp, err := st.BeginRefund(ctx, pb1, "support")
	if err != nil {
		t.Fatal(err)
	}
	twice("FinishRefund of a paid order", func() error { _, err := st.FinishRefund(ctx, rp, "re_b1", store.RefundSucceeded); return err })
	wantEvents(t, st, "BATCH1", order.StatusPaid, order.StatusRefunded)

	// A confirmed refund of a closed order: its second event, with the refund.
	pending("REFUND", 10)
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "REFUND", UserID: 10, ItemID: it.ID}, closing); err != nil {
		t.Fatal(err)
	}
	r, err := st.BeginRefund(ctx, payment(t, st, it.ID, "REFUND", 10, payBy, "pi_rf"), "late")
	if err != nil {
		t.Fatal(err)
	}
	twice("FinishRefund", func() error { _, err := st.FinishRefund(ctx, r, "re_ev", store.RefundSucceeded); return err })
	evs := wantEvents(t, st, "REFUND", order.StatusCancelled, order.StatusRefunded)
	if e := evs[1]; e.RefundID != "re_ev" || e.PaymentID != "pi_rf" || e.AmountMinor != 100 || e.Seq != 2 || e.OccurredAt.Before(evs[0].OccurredAt) {
		t.Fatalf("refund event %+v", e)
	}

	// None of them is published yet; marking is once per row.
	un, err := st.UnpublishedEvents(ctx, 100)
	if err != nil || len(un) != 14 {
		t.Fatalf("%d unpublished %v, want 14", len(un), err)
	}
	for i := 1; i < len(un); i++ {
		if un[i].ID <= un[i-1].ID {
			t.Fatal("unpublished events not in id order")
		}
	}
	if err := st.MarkPublished(ctx, []int64{un[0].ID, un[1].ID}); err != nil {
		t.Fatal(err)
	}
	if un2, err := st.UnpublishedEvents(ctx, 100); err != nil || len(un2) != 12 || un2[0].ID != un[2].ID {
		t.Fatalf("after marking two: %d %v", len(un2), err)
	}
	all, err := st.EventsSince(ctx, now.Add(-time.Minute), 0, 100)
	if err != nil || len(all) != 14 {
		t.Fatalf("replay: %d %v", len(all), err)
	}
	if tail, err := st.EventsSince(ctx, now.Add(-time.Minute), all[12].ID, 100); err != nil || len(tail) != 1 {
		t.Fatalf("replay after id: %d %v", len(tail), err)
	}
}

// One session at a time holds the lease; it is free again once released.
func TestLeaseIsExclusive(t *testing.T) {
	st, _ := newSale(t, 1)
	ctx := context.Background()
	name := "lease-" + time.Now().Format("150405.000000000")
	a, err := st.TryLease(ctx, name)
	if err != nil || a == nil || !a.Held(ctx) {
		t.Fatalf("first lease %v %v", a, err)
	}
	if b, err := st.TryLease(ctx, name); err != nil || b != nil {
		t.Fatalf("second lease while held: %v %v", b, err)
	}
	a.Release()
	b, err := st.TryLease(ctx, name)
	if err != nil || b == nil {
		t.Fatalf("lease after release: %v %v", b, err)
	}
	b.Release()
}
