// Package stripepay is the payment provider Stripe, through its official
// library: a payment is a Checkout Session (Stripe's hosted page, where the
// buyer pays by card; checkout.go), the money moves on its PaymentIntent, a
// refund is a Refund of that PaymentIntent, a notification a webhook event
// checked with the library's webhook package (webhook.go). A PaymentIntent
// id (pi_…, what payments opened before Checkout hold) still works
// everywhere a payment id is taken. The library's own retries are off:
// provider.Guard retries, behind its limiter.
package stripepay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/seckill/seckill/payment/provider"
)

// Config is what the client needs of Stripe.
type Config struct {
	Key           string        // the secret API key (sk_live_… / sk_test_…)
	WebhookSecret string        // the endpoint's signing secret (whsec_…)
	Tolerance     time.Duration // a notification's age limit (default provider.DefaultTolerance)
	URL           string        // the API's base URL: empty for Stripe's, stripe-mock's in tests
	HTTPClient    *http.Client  // default: a 20 s timeout per request
	// During a rotation, the secret before WebhookSecret: a notification
	// signed with either is accepted.
	WebhookSecretPrevious string
}

// Client is Stripe as a provider.Provider. Wrap it in provider.Guard.
type Client struct {
	sc  *stripe.Client
	cfg Config
}

var _ provider.Provider = (*Client)(nil)

// New returns a client; it calls nothing until asked.
func New(cfg Config) *Client {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = provider.DefaultTolerance
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 20 * time.Second}
	}
	// The library logs nothing: every failure is returned, and its caller
	// decides what to say.
	bc := &stripe.BackendConfig{HTTPClient: cfg.HTTPClient, MaxNetworkRetries: stripe.Int64(0),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}}
	if cfg.URL != "" {
		bc.URL = stripe.String(cfg.URL)
	}
	return &Client{sc: stripe.NewClient(cfg.Key, stripe.WithBackends(stripe.NewBackendsWithConfig(bc))), cfg: cfg}
}

// MetadataPayBy is the metadata key of the order's deadline (on the
// Checkout Session and its PaymentIntent): Stripe expires a session 30 min
// to 24 h after its creation, the saga's close expires it at pay_by.
const MetadataPayBy = "pay_by"

// isSession reports whether id names a Checkout Session (cs_test_…,
// cs_live_…); anything else is a PaymentIntent's (pi_…).
func isSession(id string) bool { return strings.HasPrefix(id, "cs_") }

// Cancel closes a payment: a Checkout Session is expired
// (cancelSession), a PaymentIntent canceled.
func (c *Client) Cancel(ctx context.Context, id string) (provider.Payment, error) {
	if isSession(id) {
		return c.cancelSession(ctx, id)
	}
	pi, err := c.sc.V1PaymentIntents.Cancel(ctx, id, nil)
	if err == nil {
		return payment(pi), nil
	}
	var se *stripe.Error
	if !errors.As(err, &se) || se.Code != stripe.ErrorCodePaymentIntentUnexpectedState {
		return provider.Payment{}, classify("cancel payment "+id, err)
	}
	// Not cancelable in its state: the state says who won.
	p, lerr := c.Lookup(ctx, id)
	switch {
	case lerr != nil:
		return provider.Payment{}, lerr
	case p.Status == provider.Succeeded:
		return p, fmt.Errorf("stripe: cancel payment %s: %w", id, provider.ErrAlreadySucceeded)
	case p.Status == provider.Canceled:
		return p, nil
	}
	// processing: it may still succeed; ask again later.
	return p, fmt.Errorf("stripe: cancel payment %s, %s: %w", id, se.Msg, provider.ErrUnavailable)
}

// Refund refunds the whole PaymentIntent of the payment (a Checkout
// Session's is read first) under key; the refund names the payment id as
// given.
func (c *Client) Refund(ctx context.Context, id, key string) (provider.Refund, error) {
	intent := id
	if isSession(id) {
		var err error
		if intent, err = c.sessionIntent(ctx, id); err != nil {
			return provider.Refund{}, err
		}
	}
	params := &stripe.RefundCreateParams{PaymentIntent: stripe.String(intent)}
	params.SetIdempotencyKey(key)
	re, err := c.sc.V1Refunds.Create(ctx, params)
	if err != nil {
		return provider.Refund{}, classify("refund payment "+id, err)
	}
	return refund(re, id), nil
}

// LookupRefund reads a refund's state (GET /v1/refunds/{id}).
func (c *Client) LookupRefund(ctx context.Context, id string) (provider.Refund, error) {
	re, err := c.sc.V1Refunds.Retrieve(ctx, id, nil)
	if err != nil {
		return provider.Refund{}, classify("look up refund "+id, err)
	}
	pi := ""
	if re.PaymentIntent != nil {
		pi = re.PaymentIntent.ID
	}
	return refund(re, pi), nil
}

// refund is Stripe's refund in the shop's words: canceled (by Stripe, or in
// the dashboard) is failed, anything not final is pending.
func refund(re *stripe.Refund, paymentID string) provider.Refund {
	r := provider.Refund{ID: re.ID, PaymentID: paymentID, Amount: re.Amount, Currency: strings.ToUpper(string(re.Currency))}
	switch re.Status {
	case stripe.RefundStatusSucceeded:
		r.Status = provider.RefundSucceeded
	case stripe.RefundStatusFailed, stripe.RefundStatusCanceled:
		r.Status = provider.RefundFailed
	default:
		r.Status = provider.RefundPending
	}
	return r
}

// Lookup reads the payment's state: a Checkout Session with its
// PaymentIntent's latest charge (lookupSession), or a PaymentIntent.
func (c *Client) Lookup(ctx context.Context, id string) (provider.Payment, error) {
	if isSession(id) {
		return c.lookupSession(ctx, id)
	}
	params := &stripe.PaymentIntentRetrieveParams{}
	params.AddExpand("latest_charge") // its created: when a succeeded payment succeeded
	pi, err := c.sc.V1PaymentIntents.Retrieve(ctx, id, params)
	if err != nil {
		return provider.Payment{}, classify("look up payment "+id, err)
	}
	return payment(pi), nil
}

func payment(pi *stripe.PaymentIntent) provider.Payment {
	p := provider.Payment{ID: pi.ID, OrderID: pi.Metadata[provider.MetadataOrderID], Amount: pi.Amount,
		Currency: strings.ToUpper(string(pi.Currency)), Status: provider.Pending}
	switch pi.Status {
	case stripe.PaymentIntentStatusSucceeded:
		p.Status = provider.Succeeded
		if pi.LatestCharge != nil && pi.LatestCharge.Created != 0 {
			p.SucceededAt = time.Unix(pi.LatestCharge.Created, 0).UTC() // only when expanded
		}
	case stripe.PaymentIntentStatusCanceled:
		p.Status = provider.Canceled
	}
	return p
}

// classify wraps a failed call's error in the provider's words: 429 is
// ErrRateLimited; a 5xx, a timeout or a connection error ErrUnavailable
// (both retried by provider.Guard); 404 ErrNotFound; anything else, a
// request Stripe refused, stays as it is (permanent).
func classify(op string, err error) error {
	var se *stripe.Error
	if errors.As(err, &se) {
		switch {
		case se.HTTPStatusCode == http.StatusTooManyRequests || se.Code == stripe.ErrorCodeRateLimit || se.Code == stripe.ErrorCodeLockTimeout:
			return fmt.Errorf("stripe: %s: %w: %w", op, provider.ErrRateLimited, err)
		case se.HTTPStatusCode >= 500, se.HTTPStatusCode == http.StatusConflict: // 409: the same key in flight
			return fmt.Errorf("stripe: %s: %w: %w", op, provider.ErrUnavailable, err)
		case se.HTTPStatusCode == http.StatusNotFound || se.Code == stripe.ErrorCodeResourceMissing:
			return fmt.Errorf("stripe: %s: %w: %w", op, provider.ErrNotFound, err)
		}
		return fmt.Errorf("stripe: %s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("stripe: %s: %w", op, err) // the caller gave up: not for a retry
	}
	return fmt.Errorf("stripe: %s: %w: %w", op, provider.ErrUnavailable, err)
}
