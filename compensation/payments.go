package compensation

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// PaymentStore is what the payment compensations read and write (store.Store).
type PaymentStore interface {
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	OrderPayments(ctx context.Context, orderID string) ([]store.Payment, error)
	ApplyPaymentEvent(ctx context.Context, e store.PaymentEvent) (store.EventResult, error)
	OrderRefunds(ctx context.Context, orderID string) ([]store.Refund, error)
	NamePayment(ctx context.Context, p store.Payment, providerID, checkoutURL string) (store.Payment, error)
	BeginRefund(ctx context.Context, p store.Payment, reason string) (store.Refund, error)
	RetryRefund(ctx context.Context, r store.Refund) (store.Refund, error)
	NoteRefundError(ctx context.Context, r store.Refund, msg string) error
	FinishRefund(ctx context.Context, r store.Refund, providerRefundID, status string) (store.Order, error)
}

var _ PaymentStore = (*store.Store)(nil)

// Payments is the provider the saga cancels and refunds through.
type Payments struct {
	Provider provider.Provider // behind provider.Guard; nil: none (door)
	Name     string            // its name in the payments table (testpay, stripe)
	Store    PaymentStore
	Failures Counter // refund attempts that failed (seckill_payment_refund_failures_total)
}

// WithPayments gives c the payments it cancels and refunds. Without it
// CancelPayment and RefundPayment do nothing (unit tests); with a nil
// Provider (SECKILL_PAYMENT_PROVIDER=door) a payment found pending or owed
// fails the step, retried until a worker with its provider takes it.
// (A function: every method of Activities is registered as an activity.)
func WithPayments(c *Activities, p Payments) *Activities {
	c.pay = &p
	return c
}

// RefundKey is the provider's idempotency key of a payment's refund: the
// saga, a late notification's refund workflow and every retry meet one refund.
func RefundKey(providerPaymentID string) string { return "refund-" + providerPaymentID }

// refundKey is the key of a refund row's attempt: after the provider failed
// one for good, the next asks under a new key (the old one answers failed).
func refundKey(r store.Refund) string {
	if r.Attempt == 0 {
		return RefundKey(r.ProviderPaymentID)
	}
	return fmt.Sprintf("%s-%d", RefundKey(r.ProviderPaymentID), r.Attempt)
}

// ErrTypeWrongProvider: the order's money is with a provider this worker
// does not have (a rolling change of SECKILL_PAYMENT_PROVIDER): retried
// until a worker that has it takes the step, never completed without it.
const ErrTypeWrongProvider = "WRONG_PAYMENT_PROVIDER"

// elsewhere is the retryable failure of a step whose payment p is with a
// provider this worker does not have.
func (c *Activities) elsewhere(p store.Payment) error {
	here := "none (door)"
	if c.pay != nil {
		here = c.pay.Name
	}
	return temporal.NewApplicationError(fmt.Sprintf("payment %s of order %s is with provider %q; this worker's is %s",
		p.ProviderPaymentID, p.OrderID, p.Provider, here), ErrTypeWrongProvider)
}

// CancelPayment's outcomes.
const (
	CancelNone      = "none"      // no pending payment: no provider call
	CancelCanceled  = "canceled"  // the provider closed it: it can never succeed
	CancelSucceeded = "succeeded" // it had succeeded: judged as its notification would be
)

type PaymentInput struct {
	OrderID string `json:"order_id"`
	Reason  string `json:"reason,omitempty"`
	// Support: an admin's refund of a PAID order; its own payment is due too.
	Support bool `json:"support,omitempty"`
}

// ErrTypeNoProvider: a support refund reached a worker without a provider.
const ErrTypeNoProvider = "NO_PAYMENT_PROVIDER"

type CancelResult struct {
	Outcome string `json:"outcome"`
	// Succeeded: some payment of the order took money (refunded if the
	// order ends without its unit). Due: some must be refunded whatever
	// the order ends as (ledger.RefundDue now: a mismatch, late, another's).
	Succeeded bool `json:"succeeded,omitempty"`
	Due       bool `json:"due,omitempty"`
	// Paid: the order row is paid now (PAID, or QUEUED with paid_at): a
	// payment confirmed before pay_by, which the close must not undo.
	Paid bool `json:"paid,omitempty"`
}

// CancelPayment closes the order's pending provider payments before the
// saga gives its unit back. A payment that already succeeded wins: its
// success is applied as its notification would be (store.ApplyPaymentEvent,
// judged by the provider's success time against pay_by), so an order paid
// in time is PAID and the saga's close leaves it so.
func (c *Activities) CancelPayment(ctx context.Context, in PaymentInput) (CancelResult, error) {
	out := CancelResult{Outcome: CancelNone}
	if c.pay == nil {
		return out, nil
	}
	ps, err := c.pay.Store.OrderPayments(ctx, in.OrderID)
	if err != nil || len(ps) == 0 {
		return out, err
	}
	for _, p := range ps {
		if p.Status != store.PaymentPending {
			continue
		}
		if p.Provider != c.pay.Name {
			return CancelResult{}, c.elsewhere(p)
		}
		if out.Outcome, err = c.cancelOne(ctx, p); err != nil {
			return CancelResult{}, err
		}
	}
	return c.refundable(ctx, in.OrderID, out)
}

// cancelOne cancels p at the provider and records what it answered. A
// payment opened but never named (the provider's answer to its create was
// lost) is created again under its key with its stored parameters — the
// provider answers the first create — and named first.
func (c *Activities) cancelOne(ctx context.Context, p store.Payment) (string, error) {
	if !p.Named() {
		pay, err := c.pay.Provider.Create(ctx, p.Request())
		if err != nil {
			return "", fmt.Errorf("replay the create of order %s's payment: %w", p.OrderID, err)
		}
		if p, err = c.pay.Store.NamePayment(ctx, p, pay.ID, pay.CheckoutURL); err != nil {
			return "", err
		}
	}
	pp, err := c.pay.Provider.Cancel(ctx, p.ProviderPaymentID)
	ev := store.PaymentEvent{ID: "saga-cancel:" + p.Provider + ":" + p.ProviderPaymentID, Type: string(provider.PaymentCanceled),
		Provider: p.Provider, PaymentID: p.ProviderPaymentID}
	outcome := CancelCanceled
	switch {
	case errors.Is(err, provider.ErrAlreadySucceeded) || err == nil && pp.Status == provider.Succeeded:
		at := pp.SucceededAt
		if at.IsZero() {
			at = time.Now() // the provider does not say when: judged now (late past pay_by, so refunded)
		}
		ev.Type, ev.OrderID, ev.Amount, ev.Currency, ev.At = string(provider.PaymentSucceeded), pp.OrderID, pp.Amount, pp.Currency, at
		outcome = CancelSucceeded
	case errors.Is(err, provider.ErrNotFound):
		// Unknown to the provider: it can never succeed.
	case err != nil:
		return "", fmt.Errorf("cancel payment %s of order %s: %w", p.ProviderPaymentID, p.OrderID, err)
	}
	r, err := c.pay.Store.ApplyPaymentEvent(ctx, ev)
	if err != nil {
		return "", err
	}
	activity.GetLogger(ctx).Info("CancelPayment", "order_id", p.OrderID, "payment_id", p.ProviderPaymentID,
		"outcome", outcome, "verdict", r.Verdict)
	return outcome, nil
}

// refundable fills out's Succeeded and Due from the order's payments now.
func (c *Activities) refundable(ctx context.Context, orderID string, out CancelResult) (CancelResult, error) {
	ps, err := c.pay.Store.OrderPayments(ctx, orderID)
	if err != nil {
		return CancelResult{}, err
	}
	row, err := c.pay.Store.FindOrder(ctx, orderID)
	if err != nil && !errors.Is(err, order.ErrNotFound) {
		return CancelResult{}, err
	}
	out.Paid = err == nil && (row.Status == order.StatusPaid || row.PaidQueued())
	for _, p := range ps {
		out.Succeeded = out.Succeeded || ledger.Took(p.Facts())
		out.Due = out.Due || ledger.RefundDue(p.Facts(), row.Facts(), err == nil)
	}
	return out, nil
}

type RefundResult struct {
	RefundIDs []string   `json:"refund_ids,omitempty"` // the provider's, of this order's payments refunded
	Order     order.View `json:"order"`                // the order row after, with RefundID
}

// RefundPayment refunds every payment of the order whose money must go back
// (ledger.RefundDue, or a refund row not confirmed yet: support's included)
// through the provider, and records it (refunds; a closed order becomes
// REFUNDED). It fails, and is retried, until the provider confirms each
// refund; a payment with another provider than this worker's fails it too
// (retried until a worker with that provider takes it).
func (c *Activities) RefundPayment(ctx context.Context, in PaymentInput) (RefundResult, error) {
	var out RefundResult
	if (c.pay == nil || c.pay.Provider == nil) && in.Support {
		return out, temporal.NewNonRetryableApplicationError("this worker has no payment provider (SECKILL_PAYMENT_PROVIDER)", ErrTypeNoProvider, nil)
	}
	if c.pay == nil {
		return out, nil
	}
	st := c.pay.Store
	ps, err := st.OrderPayments(ctx, in.OrderID)
	if err != nil {
		return out, err
	}
	rs, err := st.OrderRefunds(ctx, in.OrderID)
	if err != nil {
		return out, err
	}
	open := map[int64]bool{} // payments with a refund owed and not confirmed
	for _, r := range rs {
		open[r.PaymentID] = r.Status != store.RefundSucceeded
	}
	row, err := st.FindOrder(ctx, in.OrderID)
	found := err == nil
	if err != nil && !errors.Is(err, order.ErrNotFound) {
		return out, err
	}
	var last store.Refund // the latest refund made or found
	for _, p := range ps {
		support := in.Support && found && row.Status == order.StatusPaid && ledger.PaidWith(p.Facts(), row.Facts())
		if !support && !open[p.ID] && !ledger.RefundDue(p.Facts(), row.Facts(), found) {
			continue
		}
		if !ledger.Took(p.Facts()) {
			continue // nothing to give back (a row written by hand is the books' refund_without_payment)
		}
		if p.Provider != c.pay.Name {
			return RefundResult{}, c.elsewhere(p)
		}
		r, after, err := c.refundOne(ctx, p, in.Reason)
		if err != nil {
			c.pay.Failures.Inc()
			activity.GetLogger(ctx).Error("refund failed; retried until the provider confirms", "order_id", p.OrderID,
				"payment_id", p.ProviderPaymentID, "attempt", activity.GetInfo(ctx).Attempt, "error", err)
			return RefundResult{}, err
		}
		out.RefundIDs = append(out.RefundIDs, r.ProviderRefundID)
		if after.OrderID != "" {
			row = after
		}
		last = r
	}
	if row.OrderID != "" {
		out.Order = last.Show(row.View())
	}
	return out, nil
}

// refundOne takes p's refund row to the provider until it confirms it: a
// refund asked before is looked up, never asked again (its key would answer
// its first answer); one the provider failed for good is asked anew under
// the next attempt's key. It returns the refund and the order row after.
func (c *Activities) refundOne(ctx context.Context, p store.Payment, reason string) (store.Refund, store.Order, error) {
	st := c.pay.Store
	r, err := st.BeginRefund(ctx, p, reason)
	if err == nil && r.Status == store.RefundFailed {
		r, err = st.RetryRefund(ctx, r)
	}
	if err != nil {
		return r, store.Order{}, err
	}
	if r.Status != store.RefundSucceeded {
		var pr provider.Refund
		if r.ProviderRefundID != "" {
			pr, err = c.pay.Provider.LookupRefund(ctx, r.ProviderRefundID)
		} else {
			pr, err = c.pay.Provider.Refund(ctx, p.ProviderPaymentID, refundKey(r))
		}
		if err != nil {
			err = fmt.Errorf("refund payment %s of order %s: %w", p.ProviderPaymentID, p.OrderID, err)
			return r, store.Order{}, errors.Join(err, st.NoteRefundError(ctx, r, err.Error()))
		}
		r.ProviderRefundID, r.Status, r.UpdatedAt = pr.ID, string(pr.Status), time.Now() // as FinishRefund records it
	}
	row, err := st.FinishRefund(ctx, r, r.ProviderRefundID, r.Status)
	if err != nil && !errors.Is(err, order.ErrNotFound) {
		return r, store.Order{}, err
	}
	if r.Status != store.RefundSucceeded {
		err := fmt.Errorf("refund %s of payment %s is %s, not confirmed", r.ProviderRefundID, p.ProviderPaymentID, r.Status)
		return r, store.Order{}, errors.Join(err, st.NoteRefundError(ctx, r, err.Error()))
	}
	activity.GetLogger(ctx).Info("RefundPayment", "order_id", p.OrderID, "payment_id", p.ProviderPaymentID,
		"refund_id", r.ProviderRefundID, "amount", p.Amount, "currency", p.Currency, "reason", reason)
	return r, row, nil
}
