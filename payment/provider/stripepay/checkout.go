package stripepay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/seckill/seckill/payment/provider"
)

// A Checkout Session's expires_at must lie 30 min to 24 h after its
// creation (Stripe refuses anything else); margin keeps the value inside
// those bounds whatever the latency and a clock a little off.
// A Checkout Session's life bounds (Stripe's), as the provider package states them.
const (
	MinSessionLife = provider.MinSessionLife
	MaxSessionLife = provider.MaxSessionLife
)

// SessionExpiry is provider.SessionExpiry: the expires_at a session is
// created with (the cashier stores it with the payment before the create).
func SessionExpiry(payBy, now time.Time) time.Time { return provider.SessionExpiry(payBy, now) }

// Create opens a Checkout Session for the order: payment mode, one line of
// the order's amount and currency (quantity 1, not adjustable), card only
// (a delayed method could not settle by pay_by), no promotion codes and no
// adaptive pricing (either would change the amount), the order id as
// client_reference_id and in the session's and its PaymentIntent's
// metadata beside pay_by, success and cancel URLs back to the order's page,
// expires_at SessionExpiry (or the request's), the request's idempotency
// key (the order id). The payment is the session: its id (cs_…) and url,
// where the buyer pays.
func (c *Client) Create(ctx context.Context, r provider.Request) (provider.Payment, error) {
	expires := r.ExpiresAt
	if expires.IsZero() {
		expires = SessionExpiry(r.PayBy, time.Now())
	}
	name := r.Name
	if name == "" {
		name = "Order " + r.OrderID
	}
	meta := map[string]string{provider.MetadataOrderID: r.OrderID}
	if !r.PayBy.IsZero() {
		meta[MetadataPayBy] = r.PayBy.UTC().Format(time.RFC3339)
	}
	params := &stripe.CheckoutSessionCreateParams{
		Mode: stripe.String(string(stripe.CheckoutSessionModePayment)),
		LineItems: []*stripe.CheckoutSessionCreateLineItemParams{{
			Quantity: stripe.Int64(1),
			PriceData: &stripe.CheckoutSessionCreateLineItemPriceDataParams{
				Currency:    stripe.String(strings.ToLower(r.Currency)),
				UnitAmount:  stripe.Int64(r.Amount),
				ProductData: &stripe.CheckoutSessionCreateLineItemPriceDataProductDataParams{Name: stripe.String(name)},
			},
		}},
		PaymentMethodTypes:  []*string{stripe.String("card")},
		AllowPromotionCodes: stripe.Bool(false),
		AdaptivePricing:     &stripe.CheckoutSessionCreateAdaptivePricingParams{Enabled: stripe.Bool(false)},
		ClientReferenceID:   stripe.String(r.OrderID),
		Metadata:            meta,
		PaymentIntentData:   &stripe.CheckoutSessionCreatePaymentIntentDataParams{Metadata: maps.Clone(meta)},
		ExpiresAt:           stripe.Int64(expires.Unix()),
	}
	if r.ReturnURL != "" {
		params.SuccessURL, params.CancelURL = stripe.String(r.ReturnURL), stripe.String(r.ReturnURL)
	}
	params.SetIdempotencyKey(r.Key())
	cs, err := c.sc.V1CheckoutSessions.Create(ctx, params)
	if err != nil {
		return provider.Payment{}, classify("create checkout session for order "+r.OrderID, err)
	}
	p := sessionPayment(cs)
	// They are in the request; an answer without them (stripe-mock's
	// fixture) is still this order's.
	p.OrderID = r.OrderID
	if p.Amount == 0 {
		p.Amount, p.Currency = r.Amount, r.Currency
	}
	return p, nil
}

// cancelSession expires an open session. One Stripe will not expire (it
// completed, or expired already) is looked up: paid is
// ErrAlreadySucceeded (the payment wins), expired a done cancel, complete
// but unpaid ErrUnavailable (its payment may still settle: ask again).
func (c *Client) cancelSession(ctx context.Context, id string) (provider.Payment, error) {
	cs, err := c.sc.V1CheckoutSessions.Expire(ctx, id, nil)
	if err == nil {
		return sessionPayment(cs), nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.HTTPStatusCode != http.StatusBadRequest {
		return provider.Payment{}, classify("expire checkout session "+id, err)
	}
	p, lerr := c.lookupSession(ctx, id)
	switch {
	case lerr != nil:
		return provider.Payment{}, lerr
	case p.Status == provider.Succeeded:
		return p, fmt.Errorf("stripe: expire checkout session %s: %w", id, provider.ErrAlreadySucceeded)
	case p.Status == provider.Canceled:
		return p, nil
	}
	return p, fmt.Errorf("stripe: expire checkout session %s, %s: %w", id, se.Msg, provider.ErrUnavailable)
}

// lookupSession reads a session with its PaymentIntent and that one's
// latest charge, whose creation is when the payment succeeded.
func (c *Client) lookupSession(ctx context.Context, id string) (provider.Payment, error) {
	params := &stripe.CheckoutSessionRetrieveParams{}
	params.AddExpand("payment_intent.latest_charge")
	cs, err := c.sc.V1CheckoutSessions.Retrieve(ctx, id, params)
	if err != nil {
		return provider.Payment{}, classify("look up checkout session "+id, err)
	}
	return sessionPayment(cs), nil
}

// sessionIntent is the PaymentIntent of a session, which Stripe creates
// when the buyer pays: a session without one took no money.
func (c *Client) sessionIntent(ctx context.Context, id string) (string, error) {
	cs, err := c.sc.V1CheckoutSessions.Retrieve(ctx, id, nil)
	if err != nil {
		return "", classify("look up checkout session "+id, err)
	}
	if cs.PaymentIntent == nil || cs.PaymentIntent.ID == "" {
		return "", fmt.Errorf("stripe: checkout session %s (%s, %s) has no payment intent: nothing to refund", id, cs.Status, cs.PaymentStatus)
	}
	return cs.PaymentIntent.ID, nil
}

// sessionPayment is a session in the shop's words: open is pending,
// complete and paid succeeded (when: its PaymentIntent's latest charge,
// when expanded), expired canceled; complete but unpaid (a delayed method,
// which the shop never offers) is still pending.
func sessionPayment(cs *stripe.CheckoutSession) provider.Payment {
	p := provider.Payment{ID: cs.ID, OrderID: sessionOrder(cs), Amount: cs.AmountTotal,
		Currency: strings.ToUpper(string(cs.Currency)), Status: provider.Pending, CheckoutURL: cs.URL}
	pi := cs.PaymentIntent
	if pi != nil {
		p.PaymentIntentID = pi.ID
	}
	switch cs.Status {
	case stripe.CheckoutSessionStatusComplete:
		if cs.PaymentStatus == stripe.CheckoutSessionPaymentStatusPaid || cs.PaymentStatus == stripe.CheckoutSessionPaymentStatusNoPaymentRequired {
			p.Status = provider.Succeeded
			if pi != nil && pi.LatestCharge != nil && pi.LatestCharge.Created != 0 {
				p.SucceededAt = time.Unix(pi.LatestCharge.Created, 0).UTC()
			}
		}
	case stripe.CheckoutSessionStatusExpired:
		p.Status = provider.Canceled
	}
	return p
}

// sessionOrder is the order a session is for: its metadata, else its
// client_reference_id (both are set at Create).
func sessionOrder(cs *stripe.CheckoutSession) string {
	if id := cs.Metadata[provider.MetadataOrderID]; id != "" {
		return id
	}
	return cs.ClientReferenceID
}
