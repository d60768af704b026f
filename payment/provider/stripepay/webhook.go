package stripepay

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/seckill/seckill/payment/provider"
)

// SessionTypes maps the Checkout Session event types the shop acts on to
// its own (the PaymentIntent ones are provider.StripeTypes). Register
// these, and payment_intent.succeeded, payment_intent.canceled and
// payment_intent.payment_failed, on the endpoint in Stripe's dashboard.
var SessionTypes = map[string]provider.EventType{
	"checkout.session.completed":               provider.PaymentSucceeded, // when paid (card: always)
	"checkout.session.async_payment_succeeded": provider.PaymentSucceeded,
	"checkout.session.expired":                 provider.PaymentCanceled,
	"checkout.session.async_payment_failed":    provider.PaymentFailed,
}

// Verify checks the Stripe-Signature header with the library (any API
// version: the shop reads only fields every version has) against the
// signing secret, then the previous one. Without a secret it refuses
// everything: the library would take a signature anyone can make with "".
//
// A Checkout Session's event names the session, the payment the shop
// holds. A PaymentIntent's names the PaymentIntent (PaymentID and
// PaymentIntentID) and its order (the metadata the session gave it): the
// door finds the order's payment by that (cashier.Notify).
func (c *Client) Verify(payload []byte, signature string) (provider.Event, error) {
	if c.cfg.WebhookSecret == "" {
		return provider.Event{}, fmt.Errorf("stripe: %w: no webhook signing secret", provider.ErrBadSignature)
	}
	opts := webhook.ConstructEventOptions{Tolerance: c.cfg.Tolerance, IgnoreAPIVersionMismatch: true}
	e, err := webhook.ConstructEventWithOptions(payload, signature, c.cfg.WebhookSecret, opts)
	if errors.Is(err, webhook.ErrNoValidSignature) && c.cfg.WebhookSecretPrevious != "" {
		e, err = webhook.ConstructEventWithOptions(payload, signature, c.cfg.WebhookSecretPrevious, opts)
	}
	switch {
	case errors.Is(err, webhook.ErrTooOld):
		return provider.Event{}, fmt.Errorf("stripe: %w", provider.ErrStale)
	case errors.Is(err, webhook.ErrNotSigned), errors.Is(err, webhook.ErrInvalidHeader), errors.Is(err, webhook.ErrNoValidSignature):
		return provider.Event{}, fmt.Errorf("stripe: %w: %w", provider.ErrBadSignature, err)
	case err != nil:
		return provider.Event{}, fmt.Errorf("stripe: %w: %w", provider.ErrMalformed, err)
	}
	ev := provider.Event{ID: e.ID, Type: provider.Unhandled, ProviderType: string(e.Type), At: time.Unix(e.Created, 0).UTC()}
	if t, ok := SessionTypes[string(e.Type)]; ok {
		return sessionEvent(ev, t, e)
	}
	t, ok := provider.StripeTypes[string(e.Type)]
	if !ok {
		return ev, nil
	}
	var pi stripe.PaymentIntent
	if e.Data == nil || json.Unmarshal(e.Data.Raw, &pi) != nil || pi.ID == "" {
		return provider.Event{}, fmt.Errorf("stripe: %w: %s event %s carries no payment intent", provider.ErrMalformed, e.Type, e.ID)
	}
	ev.Type, ev.PaymentID, ev.PaymentIntentID, ev.OrderID = t, pi.ID, pi.ID, pi.Metadata[provider.MetadataOrderID]
	ev.Amount, ev.Currency = pi.Amount, strings.ToUpper(string(pi.Currency))
	return ev, nil
}

// sessionEvent reads a Checkout Session's event. A session completed but
// not paid (a delayed method, which the shop never offers) pays nothing
// yet: Unhandled, its async_payment_succeeded would.
func sessionEvent(ev provider.Event, t provider.EventType, e stripe.Event) (provider.Event, error) {
	var cs stripe.CheckoutSession
	if e.Data == nil || json.Unmarshal(e.Data.Raw, &cs) != nil || cs.ID == "" {
		return provider.Event{}, fmt.Errorf("stripe: %w: %s event %s carries no checkout session", provider.ErrMalformed, e.Type, e.ID)
	}
	if e.Type == "checkout.session.completed" && cs.PaymentStatus == stripe.CheckoutSessionPaymentStatusUnpaid {
		return ev, nil
	}
	ev.Type, ev.PaymentID, ev.OrderID = t, cs.ID, sessionOrder(&cs)
	if cs.PaymentIntent != nil {
		ev.PaymentIntentID = cs.PaymentIntent.ID
	}
	ev.Amount, ev.Currency = cs.AmountTotal, strings.ToUpper(string(cs.Currency))
	return ev, nil
}
