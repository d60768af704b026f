package worker_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

// A payment the provider confirmed before pay_by wins whatever our side
// could not write then: its notification lost and the order's saga running
// only after pay_by + grace (the broker, MySQL or the worker was out), the
// saga's cancel-first learns the success in time, and the order takes its
// unit and ends PAID — never refunded for our own outage.
func TestPaymentConfirmedInTimeWinsOverALateSaga(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it := ps.item(2, 3*time.Second)
	m := ps.reserveEarly(it.ID, 7601, time.Now(), 3*time.Second)
	c := ps.checkout(m)                    // the QUEUED order's payment (the saga has not run)
	ps.tp.SetKnobs(testpay.Knobs{Drop: 1}) // its notification never arrives
	paid, err := ps.tp.Pay(ctx, c.PaymentID)
	if err != nil || !paid.SucceededAt.Before(*m.PayBy) {
		t.Fatalf("pay in time: %+v %v (pay_by %s)", paid, err, m.PayBy)
	}
	// The saga runs once pay_by + grace has passed.
	time.Sleep(time.Until(m.PayBy.Add(order.PayGrace + 500*time.Millisecond)))
	ps.publish(m)
	row := ps.waitStatus(m.OrderID, order.StatusPaid, 60*time.Second)
	if st := ps.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	if p := ps.payment(m.OrderID); p.Status != store.PaymentSucceeded || p.SucceededAt == nil || !p.SucceededAt.Equal(*row.PaidAt) {
		t.Fatalf("payment %+v, order paid at %v", p, row.PaidAt)
	}
	if rs := ps.refunds(m.OrderID); len(rs) != 0 {
		t.Fatalf("refunds %+v: a payment confirmed in time was refunded", rs)
	}
	ps.wantStock(it.ID, 1)
	ps.wantLeft(it.ID, 1)
	ps.saveHistory(m.OrderID, "payment_in_time_late_saga")
}

// An owed refund nobody works on — its row written with the decision that
// owed it (here support's ask, whose workflow start was lost), after a
// refund workflow of the same id had completed finding nothing owed — is
// driven by the worker's refund driver to the provider's confirmation,
// however old its sale; the gauges say what is owed.
func TestRefundDriverSettlesAnOwedRefundNobodyWorksOn(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	ctx := context.Background()
	it, m := ps.pending(1, 15*time.Minute, 7701)
	c := ps.checkout(m)
	if _, err := ps.tp.Pay(ctx, c.PaymentID); err != nil {
		t.Fatal(err)
	}
	ps.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	ps.waitWorkflowClosed(m.OrderID, 2*time.Minute)
	// A run of the payment's refund workflow while nothing was owed: it
	// completes without refunding (its id used to be single-use).
	if err := ps.orders.StartRefund(ctx, m.OrderID, c.PaymentID, "nothing owed yet"); err != nil {
		t.Fatal(err)
	}
	ps.waitWorkflowID(workflows.RefundWorkflowID(c.PaymentID), time.Minute)
	if row, _ := ps.st.FindOrder(ctx, m.OrderID); row.Status != order.StatusPaid {
		t.Fatalf("a run with nothing owed changed the order: %+v", row)
	}
	// Support's refund row, written; its workflow start lost.
	r, _, err := ps.st.OweSupportRefund(ctx, m.OrderID, "damaged in transit", store.AskedBySupport+"1")
	if err != nil || r.Status != store.RefundPending || r.AskedBy != "support:1" {
		t.Fatalf("owe support refund: %+v %v", r, err)
	}
	if again, _, err := ps.st.OweSupportRefund(ctx, m.OrderID, "clicked twice", store.AskedBySupport+"2"); err != nil ||
		again.ID != r.ID || again.Reason != "damaged in transit" {
		t.Fatalf("asked again: %+v %v, want the first ask's row", again, err)
	}
	if err := ps.st.DB().Exec("UPDATE refunds SET created_at = NOW(3) - INTERVAL 2 DAY, updated_at = NOW(3) - INTERVAL 1 HOUR WHERE id = ?", r.ID).Error; err != nil {
		t.Fatal(err)
	}
	cfg := config.Refunds{Interval: time.Second, Idle: time.Minute, Grace: 15 * time.Minute, Batch: 1000}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	worker.DriveRefunds(ctx, ps.st, ps.orders, "testpay", cfg, ps.metrics, log)
	if n := counter(ps.metrics.RefundDrives); n < 1 {
		t.Fatalf("drives %v, want the owed refund driven", n)
	}
	row := ps.waitStatus(m.OrderID, order.StatusRefunded, 2*time.Minute)
	rs := ps.refunds(m.OrderID)
	if len(rs) != 1 || rs[0].Status != store.RefundSucceeded || rs[0].Reason != "damaged in transit" || row.Reason != order.ReasonSupportRefund {
		t.Fatalf("refunds %+v, order %+v", rs, row)
	}
	if pr, err := ps.tp.LookupRefund(ctx, rs[0].ProviderRefundID); err != nil || pr.Status != provider.RefundSucceeded || pr.PaymentID != c.PaymentID {
		t.Fatalf("at the provider: %+v %v", pr, err)
	}
	ps.wantStock(it.ID, 1)
	// Settled: nothing owed, nothing driven again.
	drives := counter(ps.metrics.RefundDrives)
	worker.DriveRefunds(ctx, ps.st, ps.orders, "testpay", cfg, ps.metrics, log)
	if n := counter(ps.metrics.RefundDrives); n != drives {
		t.Fatalf("drives %v after the refund settled, want %v", n, drives)
	}
	if sum, err := ps.st.OwedSummary(ctx, cfg.Grace); err != nil || owedOf(t, ps, strconv.FormatInt(r.ID, 10)) {
		t.Fatalf("owed after: %+v %v", sum, err)
	}
}

// owedOf reports whether the refund row id is still owed.
func owedOf(t *testing.T, ps *paySlice, id string) bool {
	t.Helper()
	var n int64
	if err := ps.st.DB().Raw("SELECT COUNT(*) FROM refunds WHERE id = ? AND status <> 'succeeded'", id).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n > 0
}
