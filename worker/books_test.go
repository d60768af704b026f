package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// The books of a sale on the real services, the test provider in process:
// a paid order, an order refunded after its buyer cancelled, and a payment
// of another amount refunded keep the books clean. A tampered row — a
// succeeded payment of a CANCELLED order that nobody refunds (a refund the
// cashier could not start) — is a violation; reconcile's repair starts its
// PaymentRefund, which refunds it through the provider, and the books end
// clean with the order REFUNDED, never PAID.
func TestBooksReconcile(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it := ps.item(4, time.Minute)
	buy := func(user int64) order.Message {
		m := ps.buy(it.ID, user)
		ps.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
		return m
	}
	payNow := func(m order.Message) string {
		c := ps.checkout(m)
		if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
			t.Fatal(err)
		}
		return c.PaymentID
	}

	paid := buy(7401)
	payNow(paid)
	ps.waitStatus(paid.OrderID, order.StatusPaid, 30*time.Second)

	cancelled := buy(7402)
	ps.tp.SetKnobs(testpay.Knobs{Delay: time.Hour}) // notifications from here on never come
	payNow(cancelled)
	if v, err := ps.cancel(cancelled); err != nil || v.Status != order.StatusCancelled {
		t.Fatalf("cancel: %+v %v", v, err)
	}
	ps.waitStatus(cancelled.OrderID, order.StatusRefunded, time.Minute)

	mismatched := buy(7403)
	id := payNow(mismatched)
	var e provider.StripeEvent
	e.ID, e.Object, e.Type, e.Created = "evt_books_"+mismatched.OrderID, "event", "payment_intent.succeeded", time.Now().Unix()
	e.Data.Object = provider.StripeIntent{ID: id, Object: "payment_intent", Amount: 999, Currency: "eur", Status: "succeeded",
		Metadata: map[string]string{provider.MetadataOrderID: mismatched.OrderID}}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	if outcome, err := ps.cash.Notify(ctx, body, provider.Sign(body, "whsec_worker_test", time.Now())); err != nil || outcome != string(store.VerdictMismatch) {
		t.Fatalf("notification: %s %v", outcome, err)
	}
	ps.waitWorkflowID(workflows.RefundWorkflowID(id), 30*time.Second)

	check := func(grace time.Duration) invariant.Report {
		t.Helper()
		rep, err := invariant.Check(ctx, invariant.Deps{Store: ps.st, Stock: ps.stk},
			invariant.Input{ItemID: it.ID, RequirePayments: true, RefundGrace: grace})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	const want = 3 * 100 // three payments of the item's price took money, two were refunded
	if rep := check(time.Millisecond); !rep.OK() || len(rep.Money) != 1 ||
		rep.Money[0] != (store.Money{Currency: "EUR", Captured: want, Refunded: want - 100}) {
		t.Fatalf("a clean sale: %v, money %+v", rep.Violations, rep.Money)
	}

	// The tampered row: the provider took the money of a cancelled order,
	// the payments row says so, no refund was ever started.
	lost := buy(7404)
	if v, err := ps.cancel(lost); err != nil || v.Status != order.StatusCancelled {
		t.Fatalf("cancel: %+v %v", v, err)
	}
	ps.waitWorkflowClosed(lost.OrderID, 30*time.Second)
	pp, err := ps.tp.Create(ctx, provider.Request{OrderID: lost.OrderID, Amount: 100, Currency: "EUR", PayBy: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ps.tp.Pay(ctx, pp.ID); err != nil {
		t.Fatal(err)
	}
	ago := time.Now().Add(-time.Minute).UTC()
	if err := ps.st.DB().Exec("INSERT INTO payments (order_id, user_id, item_id, provider, provider_payment_id, amount, currency, status, pay_by, succeeded_at, updated_at) "+
		"VALUES (?, ?, ?, 'testpay', ?, 100, 'EUR', 'succeeded', ?, ?, ?)", lost.OrderID, lost.UserID, it.ID, pp.ID, *lost.PayBy, ago, ago).Error; err != nil {
		t.Fatal(err)
	}
	if err := ps.st.DB().Exec("UPDATE seckill_order SET updated_at = ? WHERE order_id = ?", ago, lost.OrderID).Error; err != nil {
		t.Fatal(err)
	}
	if rep := check(invariant.DefaultRefundGrace); !rep.OK() {
		t.Fatalf("owed for a minute, within the grace: %v", rep.Violations)
	}
	rep := check(time.Second)
	if v, ok := rep.Find(books.RefundMissing); !ok || v.Amount != 1 || len(rep.Violations) != 1 {
		t.Fatalf("want one refund_missing: %v", rep.Violations)
	}

	r := reconcile.New(reconcile.Deps{MySQL: ps.st, Units: ps.stk, Refunds: ps.orders, RequirePayments: true}, time.Second, ps.log)
	run, err := r.Run(ctx, []int64{it.ID}, true)
	if err != nil {
		t.Fatal(err)
	}
	var money []reconcile.Finding
	for _, f := range run.Findings {
		if f.PaymentID != "" || f.Kind == books.Unbalanced {
			money = append(money, f)
		}
	}
	if len(money) != 1 || money[0].Kind != books.RefundMissing || !money[0].Repaired || money[0].PaymentID != pp.ID {
		t.Fatalf("findings %+v, want refund_missing of %s repaired", run.Findings, pp.ID)
	}
	ps.waitWorkflowID(workflows.RefundWorkflowID(pp.ID), 30*time.Second)
	if row := ps.waitStatus(lost.OrderID, order.StatusRefunded, 10*time.Second); row.PaidAt != nil {
		t.Fatalf("the repaired order %+v", row)
	}
	if rs := ps.refunds(lost.OrderID); len(rs) != 1 || rs[0].Status != store.RefundSucceeded || rs[0].Amount != 100 {
		t.Fatalf("refunds %+v", rs)
	}
	if _, err := ps.tp.Refund(ctx, pp.ID, "another-key"); err == nil {
		t.Fatal("the payment could be refunded again: the provider did not refund it")
	}
	if rep := check(time.Second); !rep.OK() || rep.Money[0] != (store.Money{Currency: "EUR", Captured: want + 100, Refunded: want}) {
		t.Fatalf("after the repair: %v, money %+v", rep.Violations, rep.Money)
	}
	// The control room's figures: the same sums, from one query.
	if ms, err := ps.st.SaleMoney(ctx, []int64{it.ID}); err != nil || len(ms[it.ID]) != 1 ||
		ms[it.ID][0] != (store.Money{Currency: "EUR", Captured: want + 100, Refunded: want}) {
		t.Fatalf("sale money %+v %v", ms, err)
	}
}

// The books are held against the provider's own ledger: a paid sale whose
// records equal ours is clean; a partial refund made in the provider's
// dashboard (outside our books) is a violation of the checker and a finding
// of reconcile naming the order, which no repair touches.
func TestBooksHeldAgainstTheProvidersLedger(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it, m := ps.pending(1, 15*time.Minute, 7801)
	c := ps.checkout(m)
	if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
		t.Fatal(err)
	}
	ps.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	ledger := books.Ledger{Name: "testpay", Recorder: ps.tp}
	check := func() invariant.Report {
		t.Helper()
		rep, err := invariant.Check(ctx, invariant.Deps{Store: ps.st, Stock: ps.stk, Ledger: ledger},
			invariant.Input{ItemID: it.ID, RequirePayments: true})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := check(); !rep.OK() {
		t.Fatalf("records equal to ours: %v", rep.Violations)
	}
	if _, err := ps.tp.DashboardRefund(ctx, c.PaymentID, 40); err != nil {
		t.Fatal(err)
	}
	rep := check()
	if v, ok := rep.Find(books.ProviderDiffers); !ok || v.Amount != 1 || !strings.Contains(v.Detail, m.OrderID) {
		t.Fatalf("after a dashboard refund: %v, want %s naming order %s", rep.Violations, books.ProviderDiffers, m.OrderID)
	}
	r := reconcile.New(reconcile.Deps{MySQL: ps.st, Units: ps.stk, Refunds: ps.orders, RequirePayments: true, Ledger: ledger}, time.Second, ps.log)
	run, err := r.Run(ctx, []int64{it.ID}, true)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range run.Findings {
		if f.Kind == books.ProviderDiffers {
			found = f.OrderID == m.OrderID && f.PaymentID == c.PaymentID && !f.Repaired
		}
	}
	if b := run.Books; !found || len(b) != 1 || b[0].ProviderRead != 1 || len(b[0].Provider) != 1 || b[0].Provider[0].Refunded != 40 {
		t.Fatalf("reconcile: findings %+v, books %+v", run.Findings, run.Books)
	}
	if row, _ := ps.st.FindOrder(ctx, m.OrderID); row.Status != order.StatusPaid {
		t.Fatalf("a finding changed the order: %+v", row)
	}
}
