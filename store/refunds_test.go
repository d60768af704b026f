package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// RefundDue: which payments' money must go back, by the payment and its order row.
func TestRefundDue(t *testing.T) {
	payBy := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	inTime, late := payBy.Add(-time.Minute), payBy.Add(time.Second)
	pay := func(status string, at *time.Time) store.Payment {
		return store.Payment{UserID: 1, Status: status, PayBy: payBy, SucceededAt: at}
	}
	row := func(status order.Status, paidAt *time.Time) store.Order {
		return store.Order{UserID: 1, Status: status, PayBy: &payBy, PaidAt: paidAt}
	}
	other := inTime.Add(-time.Second)
	cases := []struct {
		name  string
		p     store.Payment
		row   store.Order
		found bool
		want  bool
	}{
		{"pending", pay(store.PaymentPending, nil), row(order.StatusCancelled, nil), true, false},
		{"canceled", pay(store.PaymentCanceled, nil), row(order.StatusCancelled, nil), true, false},
		{"mismatch of a paid order", pay(store.PaymentMismatch, &inTime), row(order.StatusPaid, &other), true, true},
		{"paid the order", pay(store.PaymentSucceeded, &inTime), row(order.StatusPaid, &inTime), true, false},
		{"paid the queued order", pay(store.PaymentSucceeded, &inTime), row(order.StatusQueued, &inTime), true, false},
		{"second payment", pay(store.PaymentSucceeded, &inTime), row(order.StatusPaid, &other), true, true},
		{"paid row without paid_at", pay(store.PaymentSucceeded, &inTime), row(order.StatusPaid, nil), true, false},
		{"order cancelled", pay(store.PaymentSucceeded, &inTime), row(order.StatusCancelled, nil), true, true},
		{"order failed", pay(store.PaymentSucceeded, &inTime), row(order.StatusFailed, nil), true, true},
		{"phantom unit", pay(store.PaymentSucceeded, &inTime), row(order.StatusRefunded, &inTime), true, true},
		{"late, order still open", pay(store.PaymentSucceeded, &late), row(order.StatusPendingPayment, nil), true, true},
		{"in time, order still open", pay(store.PaymentSucceeded, &inTime), row(order.StatusPendingPayment, nil), true, false},
		{"another buyer's row", pay(store.PaymentSucceeded, &inTime), store.Order{UserID: 2, Status: order.StatusPaid, PaidAt: &inTime}, true, true},
		{"no row, late", pay(store.PaymentSucceeded, &late), store.Order{}, false, true},
		{"no row, in time", pay(store.PaymentSucceeded, &inTime), store.Order{}, false, false},
	}
	for _, c := range cases {
		if got := store.RefundDue(c.p, c.row, c.found); got != c.want {
			t.Errorf("%s: RefundDue = %v, want %v", c.name, got, c.want)
		}
	}
}

// PaidWith: the payment that paid the row (what support refunds), and no other.
func TestPaidWith(t *testing.T) {
	at, other := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 11, 0, 0, 0, time.UTC)
	p := store.Payment{OrderID: "O", UserID: 1, Status: store.PaymentSucceeded, SucceededAt: &at}
	row := store.Order{OrderID: "O", UserID: 1, Status: order.StatusPaid, PaidAt: &at}
	if !store.PaidWith(p, row) {
		t.Fatal("the payment that paid the order")
	}
	for name, c := range map[string]func(p *store.Payment, r *store.Order){
		"another payment":   func(_ *store.Payment, r *store.Order) { r.PaidAt = &other },
		"paid at no time":   func(_ *store.Payment, r *store.Order) { r.PaidAt = nil },
		"not succeeded":     func(p *store.Payment, _ *store.Order) { p.Status = store.PaymentMismatch },
		"another buyer's":   func(p *store.Payment, _ *store.Order) { p.UserID = 2 },
		"another order's":   func(p *store.Payment, _ *store.Order) { p.OrderID = "P" },
		"success not known": func(p *store.Payment, _ *store.Order) { p.SucceededAt = nil },
	} {
		p2, r2 := p, row
		c(&p2, &r2)
		if store.PaidWith(p2, r2) {
			t.Errorf("%s: PaidWith", name)
		}
	}
}

// A refund is recorded once per payment, whoever asks; its success makes a
// closed order REFUNDED, and a PAID one when it refunds the payment that
// paid it.
func TestRefundRecordedOnce(t *testing.T) {
	st, it := newSale(t, 3)
	ctx := context.Background()
	payBy := time.Now().Add(time.Minute)
	pendingOrder(t, st, it.ID, "R1", 41, payBy, "pi_r1")
	apply(t, st, succeeded("evt_r1", "pi_r1", time.Now()), store.VerdictPaid)
	p, err := st.OrderPayment(ctx, "R1", "testpay")
	if err != nil {
		t.Fatal(err)
	}

	r, err := st.BeginRefund(ctx, p, "payment late")
	if err != nil || r.Status != store.RefundPending || r.Amount != 100 || r.ProviderPaymentID != "pi_r1" {
		t.Fatalf("begin: %+v %v", r, err)
	}
	if again, err := st.BeginRefund(ctx, p, "again"); err != nil || again.ID != r.ID || again.Reason != "payment late" {
		t.Fatalf("begin again: %+v %v", again, err)
	}
	// The payment that paid the order refunded (support's): REFUNDED, its unit back in the stock row, once.
	for range 2 {
		row, err := st.FinishRefund(ctx, r, "re_1", store.RefundSucceeded)
		if err != nil || row.Status != order.StatusRefunded || row.Reason != order.ReasonSupportRefund {
			t.Fatalf("finish on the PAID order it paid: %+v %v, want it REFUNDED", row, err)
		}
		if s, err := st.ReadItemState(ctx, it.ID); err != nil || s.Stock.Stock != 3 {
			t.Fatalf("stock row %+v %v, want the unit back (3)", s.Stock, err)
		}
	}
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "R2", UserID: 42, ItemID: it.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}); err != nil {
		t.Fatal(err)
	}
	p2 := payment(t, st, it.ID, "R2", 42, payBy, "pi_r2")
	r2, err := st.BeginRefund(ctx, p2, "not payable")
	if err != nil {
		t.Fatal(err)
	}
	if row, err := st.FinishRefund(ctx, r2, "re_2", store.RefundPending); err != nil || row.Status != order.StatusCancelled {
		t.Fatalf("pending refund: %+v %v", row, err)
	}
	if row, err := st.FinishRefund(ctx, r2, "re_2", store.RefundSucceeded); err != nil || row.Status != order.StatusRefunded {
		t.Fatalf("confirmed refund: %+v %v, want REFUNDED", row, err)
	}
	// A confirmed refund is never overwritten.
	if _, err := st.FinishRefund(ctx, r2, "re_other", store.RefundFailed); err != nil {
		t.Fatal(err)
	}
	rs, err := st.OrderRefunds(ctx, "R2")
	if err != nil || len(rs) != 1 || rs[0].ProviderRefundID != "re_2" || rs[0].Status != store.RefundSucceeded {
		t.Fatalf("refunds %+v %v", rs, err)
	}
}
