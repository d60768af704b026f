package stripepay

import (
	"context"
	"strings"

	"github.com/stripe/stripe-go/v82"

	"github.com/seckill/seckill/payment/provider"
)

// Record reads Stripe's own ledger of a PaymentIntent: its charges
// (captured, refunded, disputed) and its refunds (pending, failed), two
// list calls (at most 100 of each: a payment has one charge and one refund
// here). A Checkout Session's id is read through its PaymentIntent.
func (c *Client) Record(ctx context.Context, id string) (provider.Record, error) {
	pi := id
	if strings.HasPrefix(id, "cs_") {
		cs, err := c.sc.V1CheckoutSessions.Retrieve(ctx, id, nil)
		if err != nil {
			return provider.Record{}, classify("read checkout session "+id, err)
		}
		if cs.PaymentIntent == nil {
			return provider.Record{PaymentID: id, Currency: strings.ToUpper(string(cs.Currency))}, nil // never paid
		}
		pi = cs.PaymentIntent.ID
	}
	out := provider.Record{PaymentID: id}
	charges := &stripe.ChargeListParams{PaymentIntent: stripe.String(pi)}
	charges.Limit = stripe.Int64(100)
	for ch, err := range c.sc.V1Charges.List(ctx, charges) {
		if err != nil {
			return provider.Record{}, classify("list charges of "+pi, err)
		}
		out.Currency = strings.ToUpper(string(ch.Currency))
		if ch.Captured {
			out.Captured += ch.AmountCaptured
		}
		if ch.Disputed {
			out.Disputed += ch.AmountCaptured
		}
	}
	refunds := &stripe.RefundListParams{PaymentIntent: stripe.String(pi)}
	refunds.Limit = stripe.Int64(100)
	for re, err := range c.sc.V1Refunds.List(ctx, refunds) {
		if err != nil {
			return provider.Record{}, classify("list refunds of "+pi, err)
		}
		out.AddRefund(refund(re, pi))
	}
	return out, nil
}
