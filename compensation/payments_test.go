package compensation_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
)

// fakePayments holds one order's row and payments; ApplyPaymentEvent
// records the events and marks the payment as the event says (the door's
// judgement itself is store's, tested there).
type fakePayments struct {
	mu       sync.Mutex
	row      store.Order
	payments []store.Payment
	events   []store.PaymentEvent
	refunds  map[int64]store.Refund
}

func (f *fakePayments) FindOrder(context.Context, string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.row.OrderID == "" {
		return store.Order{}, order.ErrNotFound
	}
	return f.row, nil
}

func (f *fakePayments) OrderPayments(context.Context, string) ([]store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]store.Payment(nil), f.payments...), nil
}

func (f *fakePayments) ApplyPaymentEvent(_ context.Context, e store.PaymentEvent) (store.EventResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.PaymentID == "" {
		return store.EventResult{}, fmt.Errorf("event %s names no payment", e.ID)
	}
	f.events = append(f.events, e)
	for i, p := range f.payments {
		if p.ProviderPaymentID == e.PaymentID {
			switch e.Type {
			case string(provider.PaymentSucceeded):
				at := e.At
				f.payments[i].Status, f.payments[i].SucceededAt = store.PaymentSucceeded, &at
			case string(provider.PaymentCanceled):
				f.payments[i].Status = store.PaymentCanceled
			}
		}
	}
	return store.EventResult{Verdict: store.VerdictRecorded}, nil
}

func (f *fakePayments) BeginRefund(_ context.Context, p store.Payment, reason string) (store.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.refunds[p.ID]; ok {
		return r, nil
	}
	r := store.Refund{ID: p.ID, OrderID: p.OrderID, PaymentID: p.ID, ProviderPaymentID: p.ProviderPaymentID,
		Amount: p.Amount, Currency: p.Currency, Status: store.RefundPending, Reason: reason}
	f.refunds[p.ID] = r
	return r, nil
}

func (f *fakePayments) OrderRefunds(context.Context, string) ([]store.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []store.Refund
	for _, r := range f.refunds {
		out = append(out, r)
	}
	return out, nil
}

func (f *fakePayments) NamePayment(_ context.Context, p store.Payment, id, url string) (store.Payment, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.payments {
		if f.payments[i].ID == p.ID {
			if !f.payments[i].Named() {
				f.payments[i].ProviderPaymentID, f.payments[i].CheckoutURL = id, url
			}
			return f.payments[i], nil
		}
	}
	return store.Payment{}, order.ErrNotFound
}

func (f *fakePayments) RetryRefund(_ context.Context, r store.Refund) (store.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur := f.refunds[r.PaymentID]; cur.Status == store.RefundFailed {
		cur.Status, cur.Attempt, cur.ProviderRefundID = store.RefundPending, cur.Attempt+1, ""
		f.refunds[r.PaymentID] = cur
	}
	return f.refunds[r.PaymentID], nil
}

func (f *fakePayments) NoteRefundError(_ context.Context, r store.Refund, msg string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cur, ok := f.refunds[r.PaymentID]; ok && cur.Status != store.RefundSucceeded {
		cur.LastError = msg
		f.refunds[r.PaymentID] = cur
	}
	return nil
}

func (f *fakePayments) FinishRefund(_ context.Context, r store.Refund, id, status string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r.ProviderRefundID, r.Status = id, status
	f.refunds[r.PaymentID] = r
	if status == store.RefundSucceeded && (f.row.Status == order.StatusCancelled || f.row.Status == order.StatusFailed) {
		f.row.Status = order.StatusRefunded
	}
	for _, p := range f.payments { // as store's: the payment that paid the order refunded
		if status == store.RefundSucceeded && p.ID == r.PaymentID && f.row.Status == order.StatusPaid && ledger.PaidWith(p.Facts(), f.row.Facts()) {
			f.row.Status = order.StatusRefunded
		}
	}
	return f.row, nil
}

var _ compensation.PaymentStore = (*fakePayments)(nil)

func payEnv(st *fakePayments, p provider.Provider, failures *count) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	e := s.NewTestActivityEnvironment()
	c := compensation.New(&fakeStore{}, &fakeUnits{}, &count{}, &count{})
	if p != nil {
		c = compensation.WithPayments(c, compensation.Payments{Provider: p, Name: "testpay", Store: st, Failures: failures})
	}
	e.RegisterActivity(c)
	return e
}

// execute runs the activity name on in and decodes its result.
func execute[R any](t *testing.T, e *testsuite.TestActivityEnvironment, name string, in compensation.PaymentInput) R {
	t.Helper()
	v, err := e.ExecuteActivity(name, in)
	if err != nil {
		t.Fatal(err)
	}
	var res R
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func cancelPayment(t *testing.T, e *testsuite.TestActivityEnvironment) compensation.CancelResult {
	t.Helper()
	return execute[compensation.CancelResult](t, e, "CancelPayment", compensation.PaymentInput{OrderID: "O1"})
}

// Without a provider (door), or without a payment, no provider is asked.
func TestCancelPaymentNone(t *testing.T) {
	if res := cancelPayment(t, payEnv(nil, nil, nil)); res.Outcome != compensation.CancelNone {
		t.Fatalf("door: %+v", res)
	}
	st := &fakePayments{row: openRow, refunds: map[int64]store.Refund{}}
	if res := cancelPayment(t, payEnv(st, nil, nil)); res.Outcome != compensation.CancelNone || len(st.events) != 0 {
		t.Fatalf("no payment: %+v %v", res, st.events)
	}
}

// A pending payment is canceled at the provider; one that succeeded in
// time wins: its success is applied with the provider's time.
func TestCancelPayment(t *testing.T) {
	ctx := context.Background()
	tp := testpay.New(testpay.Options{})
	defer tp.Close()
	payBy := time.Now().Add(time.Hour)
	open, _ := tp.Create(ctx, provider.Request{OrderID: "O1", Amount: 100, Currency: "EUR", PayBy: payBy})
	st := &fakePayments{row: openRow, refunds: map[int64]store.Refund{}, payments: []store.Payment{
		{ID: 1, OrderID: "O1", UserID: 7, Provider: "testpay", ProviderPaymentID: open.ID, Amount: 100, Currency: "EUR", Status: store.PaymentPending, PayBy: payBy}}}
	if res := cancelPayment(t, payEnv(st, tp, nil)); res.Outcome != compensation.CancelCanceled || res.Succeeded || res.Due {
		t.Fatalf("pending: %+v", res)
	}
	if p, _ := tp.Lookup(ctx, open.ID); p.Status != provider.Canceled || st.payments[0].Status != store.PaymentCanceled {
		t.Fatalf("at the provider %+v, row %+v", p, st.payments[0])
	}

	paid, _ := tp.Create(ctx, provider.Request{OrderID: "O2", Amount: 100, Currency: "EUR", PayBy: payBy})
	won, _ := tp.Pay(ctx, paid.ID)
	st.payments = []store.Payment{{ID: 2, OrderID: "O1", UserID: 7, Provider: "testpay", ProviderPaymentID: paid.ID, Amount: 100,
		Currency: "EUR", Status: store.PaymentPending, PayBy: payBy}}
	st.events = nil
	res := cancelPayment(t, payEnv(st, tp, nil))
	if res.Outcome != compensation.CancelSucceeded || !res.Succeeded || len(st.events) != 1 {
		t.Fatalf("succeeded: %+v %+v", res, st.events)
	}
	if e := st.events[0]; e.Type != string(provider.PaymentSucceeded) || !e.At.Equal(won.SucceededAt) || e.Amount != 100 ||
		e.ID != "saga-cancel:testpay:"+paid.ID {
		t.Fatalf("event %+v, want the success at %s", e, won.SucceededAt)
	}
}

// A refund the provider fails is counted and retried with the same key: one refund.
func TestRefundPaymentOnce(t *testing.T) {
	ctx := context.Background()
	tp := testpay.New(testpay.Options{Knobs: testpay.Knobs{FailRefunds: 1}})
	defer tp.Close()
	payBy := time.Now().Add(time.Hour)
	pp, _ := tp.Create(ctx, provider.Request{OrderID: "O1", Amount: 100, Currency: "EUR", PayBy: payBy})
	won, _ := tp.Pay(ctx, pp.ID)
	closed := openRow
	closed.Status = order.StatusCancelled
	st := &fakePayments{row: closed, refunds: map[int64]store.Refund{}, payments: []store.Payment{{ID: 1, OrderID: "O1", UserID: 7,
		Provider: "testpay", ProviderPaymentID: pp.ID, Amount: 100, Currency: "EUR", Status: store.PaymentSucceeded, PayBy: payBy, SucceededAt: &won.SucceededAt}}}
	failures := &count{}
	e := payEnv(st, tp, failures)
	if _, err := e.ExecuteActivity("RefundPayment", compensation.PaymentInput{OrderID: "O1"}); err == nil || failures.n != 1 {
		t.Fatalf("first attempt: %v, failures %d", err, failures.n)
	}
	for range 2 { // the retry, then a second ask (the cashier's workflow): the same refund
		res := execute[compensation.RefundResult](t, e, "RefundPayment", compensation.PaymentInput{OrderID: "O1"})
		if len(res.RefundIDs) != 1 || res.Order.Status != order.StatusRefunded || res.Order.RefundID != res.RefundIDs[0] {
			t.Fatalf("refund: %+v", res)
		}
	}
	if _, err := tp.Refund(ctx, pp.ID, "another-key"); err == nil {
		t.Fatal("refunded twice or not at all")
	}
}

// Support's refund: a PAID order's own payment is refunded only when asked
// (Support), then the order is REFUNDED with the refund on its view; a worker
// without a provider refuses a support refund for good.
func TestRefundPaymentSupport(t *testing.T) {
	ctx := context.Background()
	tp := testpay.New(testpay.Options{})
	defer tp.Close()
	payBy := time.Now().Add(time.Hour)
	pp, _ := tp.Create(ctx, provider.Request{OrderID: "O1", Amount: 999, Currency: "EUR", PayBy: payBy})
	won, _ := tp.Pay(ctx, pp.ID)
	paid := openRow
	paid.Status, paid.PaidAt = order.StatusPaid, &won.SucceededAt
	st := &fakePayments{row: paid, refunds: map[int64]store.Refund{}, payments: []store.Payment{{ID: 1, OrderID: "O1", UserID: 7,
		Provider: "testpay", ProviderPaymentID: pp.ID, Amount: 999, Currency: "EUR", Status: store.PaymentSucceeded, PayBy: payBy, SucceededAt: &won.SucceededAt}}}
	e := payEnv(st, tp, &count{})
	refund := func(in compensation.PaymentInput) compensation.RefundResult {
		t.Helper()
		return execute[compensation.RefundResult](t, e, "RefundPayment", in)
	}
	if res := refund(compensation.PaymentInput{OrderID: "O1"}); len(res.RefundIDs) != 0 || res.Order.Status != order.StatusPaid {
		t.Fatalf("without Support a PAID order's own payment was refunded: %+v", res)
	}
	res := refund(compensation.PaymentInput{OrderID: "O1", Reason: "damaged", Support: true})
	if v := res.Order; len(res.RefundIDs) != 1 || v.Status != order.StatusRefunded || v.RefundID != res.RefundIDs[0] ||
		v.RefundAmount != 999 || v.RefundCurrency != "EUR" || v.RefundedAt == nil || st.refunds[1].Reason != "damaged" {
		t.Fatalf("support refund: %+v, refunds %+v", res, st.refunds)
	}
	if again := refund(compensation.PaymentInput{OrderID: "O1", Reason: "again", Support: true}); len(again.RefundIDs) != 1 ||
		again.RefundIDs[0] != res.RefundIDs[0] {
		t.Fatalf("repeat: %+v", again)
	}
	if _, err := payEnv(nil, nil, nil).ExecuteActivity("RefundPayment", compensation.PaymentInput{OrderID: "O1", Support: true}); err == nil {
		t.Fatal("a worker without a provider accepted a support refund")
	}
}

// paidAndClosed is a CANCELLED order whose payment (through tp) took its money.
func paidAndClosed(t *testing.T, tp *testpay.Provider) *fakePayments {
	t.Helper()
	ctx := context.Background()
	payBy := time.Now().Add(time.Hour)
	pp, _ := tp.Create(ctx, provider.Request{OrderID: "O1", Amount: 100, Currency: "EUR", PayBy: payBy})
	won, err := tp.Pay(ctx, pp.ID)
	if err != nil {
		t.Fatal(err)
	}
	closed := openRow
	closed.Status = order.StatusCancelled
	return &fakePayments{row: closed, refunds: map[int64]store.Refund{}, payments: []store.Payment{{ID: 1, OrderID: "O1", UserID: 7,
		Provider: "testpay", ProviderPaymentID: pp.ID, Amount: 100, Currency: "EUR", Status: store.PaymentSucceeded, PayBy: payBy, SucceededAt: &won.SucceededAt}}}
}

// A refund the provider answers pending is not confirmed (the step fails
// and is retried, the row stays pending with the provider's refund id); the
// retry looks it up instead of asking again, and the lookup confirms it.
func TestRefundAnsweredPendingIsConfirmedByLookup(t *testing.T) {
	tp := testpay.New(testpay.Options{Knobs: testpay.Knobs{PendingRefunds: 1}})
	defer tp.Close()
	st := paidAndClosed(t, tp)
	e := payEnv(st, tp, &count{})
	if _, err := e.ExecuteActivity("RefundPayment", compensation.PaymentInput{OrderID: "O1"}); err == nil {
		t.Fatal("a pending refund was taken as done")
	}
	r := st.refunds[1]
	if r.Status != store.RefundPending || r.ProviderRefundID == "" || r.LastError == "" || st.row.Status != order.StatusCancelled {
		t.Fatalf("after the pending answer: refund %+v, order %s", r, st.row.Status)
	}
	res := execute[compensation.RefundResult](t, e, "RefundPayment", compensation.PaymentInput{OrderID: "O1"})
	if len(res.RefundIDs) != 1 || res.RefundIDs[0] != r.ProviderRefundID || res.Order.Status != order.StatusRefunded {
		t.Fatalf("after the lookup: %+v", res)
	}
}

// A refund the provider fails for good (pending, then failed) is asked anew
// under the next attempt's key, and that one is confirmed: REFUNDED once.
func TestRefundFailedForGoodIsAskedAnew(t *testing.T) {
	tp := testpay.New(testpay.Options{Knobs: testpay.Knobs{FailingRefunds: 1}})
	defer tp.Close()
	st := paidAndClosed(t, tp)
	e := payEnv(st, tp, &count{})
	for i, want := range []string{store.RefundPending, store.RefundFailed} {
		if _, err := e.ExecuteActivity("RefundPayment", compensation.PaymentInput{OrderID: "O1"}); err == nil || st.refunds[1].Status != want {
			t.Fatalf("attempt %d: %v, refund %+v, want %s", i+1, err, st.refunds[1], want)
		}
	}
	first := st.refunds[1].ProviderRefundID
	res := execute[compensation.RefundResult](t, e, "RefundPayment", compensation.PaymentInput{OrderID: "O1"})
	if r := st.refunds[1]; len(res.RefundIDs) != 1 || res.RefundIDs[0] == first || r.Attempt != 1 || r.Status != store.RefundSucceeded ||
		res.Order.Status != order.StatusRefunded {
		t.Fatalf("asked anew: %+v, refund %+v (first %s)", res, r, first)
	}
	if again, err := tp.Refund(context.Background(), st.payments[0].ProviderPaymentID, "refund-"+st.payments[0].ProviderPaymentID+"-1"); err != nil ||
		again.ID != res.RefundIDs[0] {
		t.Fatalf("the second attempt's key at the provider: %+v %v", again, err)
	}
}

// Money with another provider than the worker's (a rolling change of the
// setting, or a worker under door) fails the step, retryably: it is never
// completed without cancelling or refunding.
func TestPaymentsOfAnotherProviderFailTheStep(t *testing.T) {
	tp := testpay.New(testpay.Options{})
	defer tp.Close()
	for name, env := range map[string]func(st *fakePayments) *testsuite.TestActivityEnvironment{
		"another provider": func(st *fakePayments) *testsuite.TestActivityEnvironment {
			for i := range st.payments {
				st.payments[i].Provider = "stripe"
			}
			return payEnv(st, tp, &count{})
		},
		"no provider (door)": func(st *fakePayments) *testsuite.TestActivityEnvironment {
			var s testsuite.WorkflowTestSuite
			e := s.NewTestActivityEnvironment()
			e.RegisterActivity(compensation.WithPayments(compensation.New(&fakeStore{}, &fakeUnits{}, &count{}, &count{}),
				compensation.Payments{Name: "door", Store: st, Failures: &count{}}))
			return e
		},
	} {
		st := paidAndClosed(t, tp)
		e := env(st)
		_, err := e.ExecuteActivity("RefundPayment", compensation.PaymentInput{OrderID: "O1"})
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != compensation.ErrTypeWrongProvider || appErr.NonRetryable() {
			t.Errorf("%s: refund: %v, want a retryable %s", name, err, compensation.ErrTypeWrongProvider)
		}
		st.payments[0].Status, st.row = store.PaymentPending, openRow
		if _, err := e.ExecuteActivity("CancelPayment", compensation.PaymentInput{OrderID: "O1"}); !errors.As(err, &appErr) ||
			appErr.Type() != compensation.ErrTypeWrongProvider {
			t.Errorf("%s: cancel: %v, want %s", name, err, compensation.ErrTypeWrongProvider)
		}
	}
}

// The close's cancel-first of a payment opened but never named (the
// create's answer was lost): the create is replayed under its key — the
// provider answers the payment it made — the row named, then canceled there.
func TestCancelPaymentOfAPaymentNeverNamed(t *testing.T) {
	ctx := context.Background()
	tp := testpay.New(testpay.Options{})
	defer tp.Close()
	payBy := time.Now().Add(time.Hour)
	made, _ := tp.Create(ctx, provider.Request{OrderID: "O1", Amount: 100, Currency: "EUR", PayBy: payBy}) // its answer lost
	st := &fakePayments{row: openRow, refunds: map[int64]store.Refund{}, payments: []store.Payment{{ID: 1, OrderID: "O1", UserID: 7,
		Provider: "testpay", ProviderPaymentID: store.Placeholder("O1"), IdempotencyKey: "O1", Amount: 100, Currency: "EUR",
		Status: store.PaymentPending, PayBy: payBy}}}
	if res := cancelPayment(t, payEnv(st, tp, nil)); res.Outcome != compensation.CancelCanceled {
		t.Fatalf("cancel: %+v", res)
	}
	if p := st.payments[0]; p.ProviderPaymentID != made.ID || p.Status != store.PaymentCanceled {
		t.Fatalf("row %+v, want named %s and canceled", p, made.ID)
	}
	if p, _ := tp.Lookup(ctx, made.ID); p.Status != provider.Canceled {
		t.Fatalf("at the provider %+v", p)
	}
}
