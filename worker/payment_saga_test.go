package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// paySlice is a pipeline whose payments go through the test provider in
// process: the cashier checks out, the saga cancels and refunds through it,
// and its notifications go to notifyURL — by default a test listener where
// this process's cashier judges them. Both ways pass the link
// (payment_faults_test.go), which a test can cut.
type paySlice struct {
	*pipeline
	tp     *testpay.Provider
	link   *link
	cash   *cashier.Cashier
	judged chan string // each notification's outcome, once the test's cashier has decided it
}

const paySecret = "whsec_worker_test"

func newPaySlice(t *testing.T, notifyURL string) *paySlice {
	t.Helper()
	ps := &paySlice{judged: make(chan string, 64), link: newLink()}
	if notifyURL == "" {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			outcome, err := ps.cash.Notify(r.Context(), body, r.Header.Get(provider.SignatureHeader))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"outcome": outcome}) // as the API answers
			select {
			case ps.judged <- outcome:
			default:
			}
		}))
		t.Cleanup(srv.Close)
		notifyURL = srv.URL
	}
	// Resent as long as a test runs (Stripe: for three days): the 7th send
	// is 63 s after the first.
	ps.tp = testpay.New(testpay.Options{Secret: paySecret, NotifyURL: notifyURL, BaseURL: "http://checkout.test",
		Client: &http.Client{Timeout: 10 * time.Second, Transport: ps.link}, Resends: 10})
	t.Cleanup(ps.tp.Close) // first: no send in flight when the listener closes
	guarded := provider.Guard(linked{ps.tp, ps.link}, provider.Limits{RPS: 1000, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond})
	ps.pipeline = newPipeline(t, pipelineOptions{pay: &compensation.Payments{Provider: guarded, Name: "testpay"}})
	ps.cash = cashier.New(ps.st, ps.views, guarded, ps.desk, cashier.Options{Provider: "testpay", Refunds: ps.orders},
		cashier.NewMetrics(prometheus.NewRegistry()), ps.log)
	return ps
}

// checkout opens the order's provider payment as the buyer's checkout does.
func (ps *paySlice) checkout(m order.Message) cashier.Checkout {
	ps.t.Helper()
	c, err := ps.cash.Checkout(context.Background(), m.OrderID, m.UserID, time.Now())
	if err != nil {
		ps.t.Fatal(err)
	}
	return c
}

func (ps *paySlice) payment(orderID string) store.Payment {
	ps.t.Helper()
	p, err := ps.st.OrderPayment(context.Background(), orderID, "testpay")
	if err != nil {
		ps.t.Fatal(err)
	}
	return p
}

func (ps *paySlice) refunds(orderID string) []store.Refund {
	ps.t.Helper()
	rs, err := ps.st.OrderRefunds(context.Background(), orderID)
	if err != nil {
		ps.t.Fatal(err)
	}
	return rs
}

// Checked out and left unpaid: at pay_by the saga cancels the provider
// payment, then closes the order and gives the unit back.
func TestPaymentCanceledAtPayBy(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	it, m := ps.pending(1, 5*time.Second, 7001)
	c := ps.checkout(m)
	ps.waitStatus(m.OrderID, order.StatusCancelled, 45*time.Second)
	ps.waitWorkflowClosed(m.OrderID, 10*time.Second)
	if p := ps.payment(m.OrderID); p.Status != store.PaymentCanceled {
		t.Fatalf("payment row %+v, want canceled", p)
	}
	if pp, err := ps.tp.Lookup(context.Background(), c.PaymentID); err != nil || pp.Status != provider.Canceled {
		t.Fatalf("at the provider: %+v %v", pp, err)
	}
	if _, err := ps.tp.Pay(context.Background(), c.PaymentID); !errors.Is(err, testpay.ErrClosed) {
		t.Fatalf("the card after the close: %v, want closed", err)
	}
	ps.wantStock(it.ID, 1)
	ps.wantLeft(it.ID, 1)
	if rs := ps.refunds(m.OrderID); len(rs) != 0 {
		t.Fatalf("refunds %+v", rs)
	}
	ps.saveHistory(m.OrderID, "payment_canceled")
}

// Paid in time, its notification delayed past pay_by: the saga's cancel
// finds the payment succeeded before pay_by, the payment wins, the order is
// PAID and its unit stays sold; the notification, when it lands, changes
// nothing and refunds nothing.
func TestPaymentWinsOverDelayedNotification(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	it, m := ps.pending(1, 8*time.Second, 7101)
	c := ps.checkout(m)
	ps.tp.SetKnobs(testpay.Knobs{Delay: 25 * time.Second})
	if _, err := ps.tp.Pay(context.Background(), c.PaymentID); err != nil {
		t.Fatal(err)
	}
	row := ps.waitStatus(m.OrderID, order.StatusPaid, 45*time.Second)
	if st := ps.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	p := ps.payment(m.OrderID)
	if p.Status != store.PaymentSucceeded || p.SucceededAt == nil || !p.SucceededAt.Before(p.PayBy) ||
		row.PaidAt == nil || !row.PaidAt.Equal(*p.SucceededAt) {
		t.Fatalf("payment %+v, order %+v", p, row)
	}
	ps.wantStock(it.ID, 0)
	ps.wantPublished(m.OrderID, order.StatusPaid)
	select { // the delayed notification lands and is judged
	case outcome := <-ps.judged:
		if outcome != string(store.VerdictRepeated) && outcome != string(store.VerdictAlreadyPaid) {
			t.Fatalf("the delayed notification of a payment that won was judged %q", outcome)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the delayed notification never reached the cashier")
	}
	if rs := ps.refunds(m.OrderID); len(rs) != 0 {
		t.Fatalf("refunds %+v", rs)
	}
	if row := ps.waitStatus(m.OrderID, order.StatusPaid, time.Second); row.Status != order.StatusPaid {
		t.Fatalf("order %+v", row)
	}
	ps.saveHistory(m.OrderID, "payment_won")
}

// The buyer cancels, the payment succeeds meanwhile (its notification
// delayed): the order stays closed, its unit goes back, and the money is
// refunded through the provider — the refund fails 10 times first (the
// FailRefunds knob), is retried, and happens once. The order ends REFUNDED
// with the refund's id; the late notification starts the payment's refund
// workflow, which finds it done.
func TestPaymentRefundedAfterClose(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	it, m := ps.pending(2, 15*time.Minute, 7201)
	c := ps.checkout(m)
	ps.tp.SetKnobs(testpay.Knobs{Delay: 5 * time.Second, FailRefunds: 10})
	if _, err := ps.tp.Pay(context.Background(), c.PaymentID); err != nil {
		t.Fatal(err)
	}
	if v, err := ps.cancel(m); err != nil || v.Status != order.StatusCancelled {
		t.Fatalf("cancel: %+v %v", v, err)
	}
	ps.waitStatus(m.OrderID, order.StatusRefunded, 90*time.Second)
	if st := ps.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	rs := ps.refunds(m.OrderID)
	if len(rs) != 1 || rs[0].Status != store.RefundSucceeded || rs[0].ProviderRefundID == "" || rs[0].Amount != 100 {
		t.Fatalf("refunds %+v", rs)
	}
	ps.wantStock(it.ID, 2)
	ps.wantLeft(it.ID, 2)
	if v, ok, err := ps.views.Status(context.Background(), m.OrderID); err != nil || !ok ||
		v.Status != order.StatusRefunded || v.RefundID != rs[0].ProviderRefundID {
		t.Fatalf("published view %+v %v %v", v, ok, err)
	}
	if n := counter(ps.metrics.RefundFailures); n < 1 {
		t.Fatalf("refund failures counted %v, want at least 1", n)
	}
	ps.saveHistory(m.OrderID, "payment_refunded")

	// The late notification: verdict not_payable, the refund workflow runs and refunds nothing twice.
	ps.waitWorkflowID(workflows.RefundWorkflowID(c.PaymentID), 30*time.Second)
	if rs := ps.refunds(m.OrderID); len(rs) != 1 || rs[0].ProviderRefundID != ps.refunds(m.OrderID)[0].ProviderRefundID {
		t.Fatalf("refunds after the late notification %+v", rs)
	}
	// At the provider: the 10 failures, then one refund, whoever asked.
	if calls, failed, ids := ps.link.refundsOf(c.PaymentID); failed != 10 || len(ids) != 1 || ids[0] != rs[0].ProviderRefundID {
		t.Fatalf("refund calls %d, failed %d, refunds %v; want 10 failed and %s", calls, failed, ids, rs[0].ProviderRefundID)
	}
	if _, err := ps.tp.Refund(context.Background(), c.PaymentID, "another-key"); err == nil {
		t.Fatal("the payment could be refunded again: it was not refunded")
	}
}

// A success of another amount while the order is open: never PAID; the
// cashier starts the payment's refund workflow, which refunds it at once and
// leaves the order to its saga; at pay_by the saga closes the order, gives
// the unit back and finds the refund made: REFUNDED, one refund.
func TestPaymentMismatchRefunded(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	it, m := ps.pending(1, 8*time.Second, 7301)
	c := ps.checkout(m)
	ps.tp.SetKnobs(testpay.Knobs{Delay: time.Hour}) // its own notification never comes: ours says 999
	if _, err := ps.tp.Pay(context.Background(), c.PaymentID); err != nil {
		t.Fatal(err)
	}
	var e provider.StripeEvent
	e.ID, e.Object, e.Type, e.Created = "evt_mismatch_"+m.OrderID, "event", "payment_intent.succeeded", time.Now().Unix()
	e.Data.Object = provider.StripeIntent{ID: c.PaymentID, Object: "payment_intent", Amount: 999, Currency: "eur", Status: "succeeded",
		Metadata: map[string]string{provider.MetadataOrderID: m.OrderID}}
	body, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	outcome, err := ps.cash.Notify(context.Background(), body, provider.Sign(body, paySecret, time.Now()))
	if err != nil || outcome != string(store.VerdictMismatch) {
		t.Fatalf("notification: %s %v", outcome, err)
	}
	ps.waitWorkflowID(workflows.RefundWorkflowID(c.PaymentID), 30*time.Second)
	rs := ps.refunds(m.OrderID)
	if len(rs) != 1 || rs[0].Status != store.RefundSucceeded {
		t.Fatalf("refunds %+v", rs)
	}
	if row, err := ps.st.FindOrder(context.Background(), m.OrderID); err != nil || row.Status != order.StatusPendingPayment {
		t.Fatalf("order while its saga runs: %+v %v", row, err)
	}
	ps.waitStatus(m.OrderID, order.StatusRefunded, 45*time.Second)
	ps.waitWorkflowClosed(m.OrderID, 10*time.Second)
	if again := ps.refunds(m.OrderID); len(again) != 1 || again[0].ProviderRefundID != rs[0].ProviderRefundID {
		t.Fatalf("refunds after the close %+v, want %+v", again, rs)
	}
	ps.wantStock(it.ID, 1)
	ps.wantLeft(it.ID, 1)
}

// waitWorkflowID waits until the workflow id's run has completed.
func (p *pipeline) waitWorkflowID(id string, within time.Duration) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		err := p.tc.GetWorkflow(ctx, id, "").Get(ctx, nil)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			p.t.Fatalf("workflow %s not completed after %s (%v)", id, within, err)
		}
		time.Sleep(200 * time.Millisecond) // not started yet
	}
}
