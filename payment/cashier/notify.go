package cashier

import (
	"context"
	"errors"
	"fmt"

	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// Metrics count the cashier's work on the API's registry.
type Metrics struct {
	notifications *prometheus.CounterVec
	checkouts     *prometheus.CounterVec
}

// NewMetrics registers the cashier's counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_payment_notifications_total",
			Help: "Provider notifications by outcome: paid, repeated, unknown_payment, mismatch, late, not_payable, already_paid, recorded, unhandled, bad_signature, stale, malformed, error; refund_not_started counts a refund workflow the cashier could not start."},
			[]string{"outcome"}),
		checkouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "seckill_payment_checkouts_total",
			Help: "Buyers' checkouts by outcome: created (a provider payment opened), existing (the one opened before), failed."},
			[]string{"outcome"}),
	}
	reg.MustRegister(m.notifications, m.checkouts)
	return m
}

// Outcomes of a notification refused before anything is written.
const (
	OutcomeBadSignature = "bad_signature"
	OutcomeStale        = "stale"
	OutcomeMalformed    = "malformed"
	OutcomeUnhandled    = "unhandled"
	OutcomeError        = "error"
)

// Notify judges a provider notification (payload and its signature
// header) and answers its outcome once the decision is durable: Verify,
// then Judge. An error wrapping provider.ErrBadSignature, ErrStale or
// ErrMalformed: nothing was written (answer 400). Any other error: whether
// the decision committed is not known, the provider resends (answer 5xx).
// An unknown payment, an unhandled type, a mismatch or a late success is no
// error: the provider must stop resending it.
func (c *Cashier) Notify(ctx context.Context, payload []byte, signature string) (string, error) {
	ev, outcome, err := c.Verify(payload, signature)
	if err != nil {
		return outcome, err
	}
	return c.Judge(ctx, ev)
}

// Verify checks a notification's signature and reads it, writing nothing
// (a refusal is counted and its outcome returned with the error).
func (c *Cashier) Verify(payload []byte, signature string) (provider.Event, string, error) {
	ev, err := c.p.Verify(payload, signature)
	if err != nil {
		outcome := OutcomeBadSignature
		switch {
		case errors.Is(err, provider.ErrStale):
			outcome = OutcomeStale
		case errors.Is(err, provider.ErrMalformed):
			outcome = OutcomeMalformed
		}
		c.m.notifications.WithLabelValues(outcome).Inc()
		c.log.Warn("payment notification refused", "outcome", outcome, "err", err)
		return provider.Event{}, outcome, fmt.Errorf("payment notification: %w", err)
	}
	return ev, "", nil
}

// Judge decides a verified notification (Verify's event) in MySQL and
// answers its outcome once the decision is durable.
func (c *Cashier) Judge(ctx context.Context, ev provider.Event) (string, error) {
	if ev.Type == provider.Unhandled {
		c.m.notifications.WithLabelValues(OutcomeUnhandled).Inc()
		c.log.Info("payment notification of a type not handled", "event", ev.ID, "type", ev.ProviderType)
		return OutcomeUnhandled, nil
	}
	if ev.PaymentIntentID != "" && ev.PaymentID == ev.PaymentIntentID {
		var err error
		if ev.PaymentID, err = c.paymentOfIntent(ctx, ev); err != nil {
			c.m.notifications.WithLabelValues(OutcomeError).Inc()
			return OutcomeError, err
		}
	}
	r, err := c.decide(ctx, store.PaymentEvent{ID: ev.ID, Type: string(ev.Type), Provider: c.opts.Provider,
		PaymentID: ev.PaymentID, OrderID: ev.OrderID, Amount: ev.Amount, Currency: ev.Currency, At: ev.At}, ev.ProviderType)
	if err != nil {
		c.m.notifications.WithLabelValues(OutcomeError).Inc()
		return OutcomeError, err
	}
	c.m.notifications.WithLabelValues(string(r.Verdict)).Inc()
	return string(r.Verdict), nil
}

// paymentOfIntent is the payment the shop holds for an event that names a
// PaymentIntent (Stripe's payment_intent.*): a Checkout Session's
// PaymentIntent carries its order id (the session gave it that metadata),
// and an order has one payment per provider, so the order's payments row
// names it — the session id. An order without a row keeps the
// PaymentIntent's id (then unknown_payment, or the row of a payment opened
// as a PaymentIntent, before Checkout).
func (c *Cashier) paymentOfIntent(ctx context.Context, ev provider.Event) (string, error) {
	if ev.OrderID == "" {
		return ev.PaymentID, nil
	}
	p, err := c.store.OrderPayment(ctx, ev.OrderID, c.opts.Provider)
	switch {
	case errors.Is(err, order.ErrNotFound):
		return ev.PaymentID, nil
	case err != nil:
		return "", fmt.Errorf("payment of order %s for event %s of payment intent %s: %w", ev.OrderID, ev.ID, ev.PaymentIntentID, err)
	}
	return p.ProviderPaymentID, nil
}

// decide applies a provider's word about a payment in one MySQL
// transaction and follows its verdict: a paid order settled, a success the
// door cannot take refunded.
func (c *Cashier) decide(ctx context.Context, e store.PaymentEvent, providerType string) (store.EventResult, error) {
	r, err := c.store.ApplyPaymentEvent(ctx, e)
	if err != nil {
		return r, err
	}
	log := c.log.With("event", e.ID, "type", providerType, "payment_id", e.PaymentID, "order_id", r.Payment.OrderID,
		"verdict", r.Verdict)
	switch r.Verdict {
	case store.VerdictPaid:
		c.settler.Settle(ctx, r.Order)
	case store.VerdictMismatch:
		log.Error("payment succeeded with another amount, currency or order: not PAID, to be refunded",
			"amount", e.Amount, "currency", e.Currency, "want_amount", r.Payment.Amount, "want_currency", r.Payment.Currency)
		c.refund(ctx, r, log)
	case store.VerdictUnknown:
		log.Warn("payment notification for a payment not known here")
	case store.VerdictLate, store.VerdictNotPayable:
		log.Warn("payment succeeded for an order it cannot pay: to be refunded", "at", e.At)
		c.refund(ctx, r, log)
	case store.VerdictAlreadyPaid:
		if p := r.Payment; p.SucceededAt != nil && (r.Order.PaidAt == nil || !r.Order.PaidAt.Equal(*p.SucceededAt)) {
			log.Warn("a second payment succeeded for a paid order: to be refunded")
			c.refund(ctx, r, log)
		}
	}
	return r, nil
}

// OutcomeRefundNotStarted counts a refund the cashier could not start: the
// decision is durable and wrote the refund row, so the order's saga (if
// still open) or the worker's refund driver takes it to the provider.
const OutcomeRefundNotStarted = "refund_not_started"

// refundStartTimeout bounds the start, which the provider's answer waits for.
const refundStartTimeout = 5 * time.Second

// refund starts the payment's refund workflow (idempotent by its id).
func (c *Cashier) refund(ctx context.Context, r store.EventResult, log *slog.Logger) {
	if c.opts.Refunds == nil {
		return
	}
	reason := "payment " + string(r.Verdict)
	ctx, cancel := context.WithTimeout(ctx, refundStartTimeout)
	defer cancel()
	if err := c.opts.Refunds.StartRefund(ctx, r.Payment.OrderID, r.Payment.ProviderPaymentID, reason); err != nil {
		c.m.notifications.WithLabelValues(OutcomeRefundNotStarted).Inc()
		log.Error("refund workflow not started", "err", err)
	}
}
