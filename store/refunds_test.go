package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

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

// An item's payments and refunds: its snapshot holds them (and no other
// item's), and SaleMoney sums them per item and currency.
func TestItemMoneyRead(t *testing.T) {
	st, a := newSale(t, 5)
	b := newItem(t, st, 5)
	ctx := context.Background()
	payBy := time.Now().Add(time.Minute)
	pendingOrder(t, st, a.ID, "M1", 51, payBy, "pi_m1")
	apply(t, st, succeeded("evt_m1", "pi_m1", time.Now()), store.VerdictPaid)
	pendingOrder(t, st, a.ID, "M2", 52, payBy, "pi_m2")
	e := succeeded("evt_m2", "pi_m2", time.Now())
	e.Amount = 999
	mism := apply(t, st, e, store.VerdictMismatch).Payment
	if _, err := st.BeginRefund(ctx, mism, "mismatch"); err != nil {
		t.Fatal(err)
	}
	pendingOrder(t, st, a.ID, "M3", 53, payBy, "pi_m3") // never paid
	pendingOrder(t, st, b.ID, "N1", 51, payBy, "pi_n1")
	paid := apply(t, st, succeeded("evt_n1", "pi_n1", time.Now()), store.VerdictPaid).Payment
	r, err := st.BeginRefund(ctx, paid, "support")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishRefund(ctx, r, "re_n1", store.RefundSucceeded); err != nil {
		t.Fatal(err)
	}

	sa, err := st.ReadItemState(ctx, a.ID)
	if err != nil || len(sa.Payments) != 3 || len(sa.Refunds) != 1 || sa.Refunds[0].PaymentID != mism.ID {
		t.Fatalf("item a: payments %+v refunds %+v %v", sa.Payments, sa.Refunds, err)
	}
	sb, err := st.ReadItemState(ctx, b.ID)
	if err != nil || len(sb.Payments) != 1 || len(sb.Refunds) != 1 || sb.Refunds[0].Status != store.RefundSucceeded {
		t.Fatalf("item b: payments %+v refunds %+v %v", sb.Payments, sb.Refunds, err)
	}
	ms, err := st.SaleMoney(ctx, []int64{a.ID, b.ID})
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[a.ID]; len(got) != 1 || got[0] != (store.Money{Currency: "EUR", Captured: 200, RefundsPending: 100}) {
		t.Errorf("item a: %+v", got)
	}
	if got := ms[b.ID]; len(got) != 1 || got[0] != (store.Money{Currency: "EUR", Captured: 100, Refunded: 100}) {
		t.Errorf("item b: %+v", got)
	}
}

// CountBySecond: orders recorded, paid and refunded, each in the second
// since the item's start it happened in (a provider's whole-second paid_at
// just before the start in the first); a second before the start and other
// items' orders are not counted.
func TestCountBySecond(t *testing.T) {
	st, it := newSale(t, 5)
	other := newItem(t, st, 5)
	ctx := context.Background()
	at := func(sec float64) time.Time { return it.StartAt.Add(time.Duration(sec * float64(time.Second))) }
	row := func(id string, user int64, item int64, created time.Time, paid *time.Time) {
		t.Helper()
		if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: user, ItemID: item}); err != nil {
			t.Fatal(err)
		}
		if err := st.DB().Exec("UPDATE seckill_order SET created_at = ?, paid_at = ? WHERE order_id = ?", created, paid, id).Error; err != nil {
			t.Fatal(err)
		}
	}
	p3 := at(3.9)
	early := at(-0.4)
	row("S1", 1, it.ID, at(0.2), &early)
	row("S2", 2, it.ID, at(0.7), &p3)
	row("S3", 3, it.ID, at(2.5), nil)
	row("S0", 4, it.ID, at(-1), nil)
	row("X1", 5, other.ID, other.StartAt.Add(10*time.Second), nil)
	pay := payment(t, st, it.ID, "S3", 3, time.Now().Add(time.Minute), "pi_s3")
	r, err := st.BeginRefund(ctx, pay, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishRefund(ctx, r, "re_s3", store.RefundSucceeded); err != nil {
		t.Fatal(err)
	}
	if err := st.DB().Exec("UPDATE refunds SET updated_at = ? WHERE id = ?", at(7.1), r.ID).Error; err != nil {
		t.Fatal(err)
	}
	got, err := st.CountBySecond(ctx, []int64{it.ID})
	if err != nil {
		t.Fatal(err)
	}
	want := map[store.SaleSecond]bool{
		{ItemID: it.ID, Kind: "accepted", Second: 0, N: 2}: true,
		{ItemID: it.ID, Kind: "accepted", Second: 2, N: 1}: true,
		{ItemID: it.ID, Kind: "paid", Second: 0, N: 1}:     true,
		{ItemID: it.ID, Kind: "paid", Second: 3, N: 1}:     true,
		{ItemID: it.ID, Kind: "refunded", Second: 7, N: 1}: true,
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %v", got, want)
	}
	for _, s := range got {
		if !want[s] {
			t.Fatalf("got %+v, want %v", got, want)
		}
	}
}
