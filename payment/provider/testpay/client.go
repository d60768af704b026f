package testpay

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

// Client is a test provider served by another process (its Handler's JSON
// API), as a provider.Provider: what the roles of make run pay through.
// The provider's refusals come back as its typed errors; a 429 is
// provider.ErrRateLimited, a 5xx, a timeout or a connection error
// provider.ErrUnavailable. Verify is local: the shared secret.
type Client struct {
	base, secret string
	hc           *http.Client
}

var _ provider.Provider = (*Client)(nil)

// NewClient reaches the test provider at baseURL with secret (its
// SECKILL_PAYMENT_TESTPAY_SECRET); hc nil: a 10 s timeout.
func NewClient(baseURL, secret string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), secret: secret, hc: hc}
}

func (c *Client) Create(ctx context.Context, r provider.Request) (pay provider.Payment, err error) {
	return pay, c.do(ctx, http.MethodPost, "/v1/payments", r, &pay)
}

func (c *Client) Lookup(ctx context.Context, id string) (pay provider.Payment, err error) {
	return pay, c.do(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(id), nil, &pay)
}

func (c *Client) Cancel(ctx context.Context, id string) (pay provider.Payment, err error) {
	return pay, c.do(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/cancel", nil, &pay)
}

// Pay is the test card, as the checkout page's button: ErrClosed (with the
// payment) when the payment is canceled or expired.
func (c *Client) Pay(ctx context.Context, id string) (pay provider.Payment, err error) {
	return pay, c.do(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/pay", nil, &pay)
}

func (c *Client) Refund(ctx context.Context, id, key string) (r provider.Refund, err error) {
	return r, c.do(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/refund", map[string]string{"key": key}, &r)
}

// SetKnobs replaces the provider's knobs.
func (c *Client) LookupRefund(ctx context.Context, id string) (r provider.Refund, err error) {
	return r, c.do(ctx, http.MethodGet, "/v1/refunds/"+url.PathEscape(id), nil, &r)
}

func (c *Client) Record(ctx context.Context, id string) (r provider.Record, err error) {
	return r, c.do(ctx, http.MethodGet, "/v1/payments/"+url.PathEscape(id)+"/record", nil, &r)
}

// DashboardRefund is a refund made by hand in the provider's dashboard.
func (c *Client) DashboardRefund(ctx context.Context, id string, amount int64) (r provider.Refund, err error) {
	return r, c.do(ctx, http.MethodPost, "/v1/payments/"+url.PathEscape(id)+"/dashboard-refund", map[string]int64{"amount": amount}, &r)
}

func (c *Client) SetKnobs(ctx context.Context, k Knobs) error {
	return c.do(ctx, http.MethodPut, "/v1/knobs", k, nil)
}

// Knobs are the provider's knobs now.
func (c *Client) Knobs(ctx context.Context) (k Knobs, err error) {
	return k, c.do(ctx, http.MethodGet, "/v1/knobs", nil, &k)
}

func (c *Client) Verify(payload []byte, signature string) (provider.Event, error) {
	return provider.VerifyNotification(payload, signature, c.secret, provider.DefaultTolerance, time.Now())
}

// do sends in as JSON and reads the answer into out; a 409's payment is
// read into out too (ErrAlreadySucceeded, ErrClosed come with it).
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("testpay: %s %s: %w: %w", method, path, provider.ErrUnavailable, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("testpay: %s %s: %w: %w", method, path, provider.ErrUnavailable, err)
	}
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			return nil
		}
		return json.Unmarshal(b, out)
	}
	var e apiError
	_ = json.Unmarshal(b, &e)
	if e.Payment != nil && out != nil {
		if p, ok := out.(*provider.Payment); ok {
			*p = *e.Payment
		}
	}
	var kind error
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		kind = provider.ErrRateLimited
	case resp.StatusCode >= 500:
		kind = provider.ErrUnavailable
	case e.Error == "not_found":
		kind = provider.ErrNotFound
	case e.Error == "already_succeeded":
		kind = provider.ErrAlreadySucceeded
	case e.Error == "closed":
		kind = ErrClosed
	default:
		return fmt.Errorf("testpay: %s %s: %s: %s %s", method, path, resp.Status, e.Error, e.Message)
	}
	return fmt.Errorf("testpay: %s %s: %w (%s)", method, path, kind, e.Message)
}
