package stripepay_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
)

const key = "sk_test_seckill"

func client(p *proxy) *stripepay.Client {
	return stripepay.New(stripepay.Config{Key: key, WebhookSecret: secret, URL: p.URL()})
}

// fast retries: the tests' waits are milliseconds.
var fast = provider.Limits{BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond}

// Create sends a PaymentIntent stripe-mock accepts: amount in minor units,
// the currency in Stripe's lower case, the order id as idempotency key and
// in the metadata beside pay_by; the answer reads back as a pending payment.
func TestCreate(t *testing.T) {
	p := stripeMock(t)
	payBy := time.Date(2026, 12, 3, 1, 0, 0, 0, time.UTC)
	pay, err := client(p).Create(context.Background(), provider.Request{OrderID: "01ORDER", Amount: 999, Currency: "EUR", PayBy: payBy})
	if err != nil {
		t.Fatal(err)
	}
	if pay.ID == "" || pay.Amount != 999 || pay.Currency != "EUR" || pay.OrderID != "01ORDER" || pay.Status != provider.Pending {
		t.Fatalf("payment %+v", pay)
	}
	reqs := p.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/payment_intents" || r.IdempotencyKey != "01ORDER" || r.Answer != 200 {
		t.Fatalf("request %+v", r)
	}
	for k, want := range map[string]string{"amount": "999", "currency": "eur", "metadata[order_id]": "01ORDER",
		"metadata[pay_by]": "2026-12-03T01:00:00Z"} {
		if got := r.Form.Get(k); got != want {
			t.Errorf("form %s = %q, want %q", k, got, want)
		}
	}
}

// Cancel, Lookup and Refund are requests stripe-mock accepts, and their
// answers read back; the refund carries the caller's key.
func TestCancelLookupRefund(t *testing.T) {
	p := stripeMock(t)
	c := client(p)
	ctx := context.Background()
	if pay, err := c.Cancel(ctx, "pi_123"); err != nil || pay.ID != "pi_123" {
		t.Fatalf("cancel: %+v, %v", pay, err)
	}
	if pay, err := c.Lookup(ctx, "pi_123"); err != nil || pay.ID != "pi_123" || pay.Amount <= 0 || pay.Currency == "" {
		t.Fatalf("lookup: %+v, %v", pay, err)
	}
	r, err := c.Refund(ctx, "pi_123", "refund-01ORDER")
	if err != nil || r.ID == "" || r.PaymentID != "pi_123" || r.Status != provider.RefundSucceeded {
		t.Fatalf("refund: %+v, %v", r, err)
	}
	if got, err := c.LookupRefund(ctx, "re_123"); err != nil || got.ID == "" || got.Status == "" {
		t.Fatalf("lookup refund: %+v, %v", got, err)
	}
	reqs := p.requests()
	want := []request{{Method: "POST", Path: "/v1/payment_intents/pi_123/cancel"}, {Method: "GET", Path: "/v1/payment_intents/pi_123"},
		{Method: "POST", Path: "/v1/refunds", IdempotencyKey: "refund-01ORDER"}, {Method: "GET", Path: "/v1/refunds/re_123"}}
	if len(reqs) != len(want) {
		t.Fatalf("requests %+v", reqs)
	}
	for i, w := range want {
		if g := reqs[i]; g.Method != w.Method || g.Path != w.Path || g.Answer != 200 || (w.IdempotencyKey != "" && g.IdempotencyKey != w.IdempotencyKey) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
	if got := reqs[2].Form.Get("payment_intent"); got != "pi_123" {
		t.Errorf("refund of %q", got)
	}
}

// A 429 and a 503 are retried by Guard with the order id as the same
// idempotency key each time, and the third try's answer is the payment.
func TestRetriesRateLimitAndOutageWithTheSameKey(t *testing.T) {
	p := stripeMock(t)
	p.answer(canned{429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`},
		canned{503, `{"error":{"type":"api_error","message":"unavailable"}}`})
	pay, err := provider.Guard(client(p), fast).Create(context.Background(), provider.Request{OrderID: "01RETRY", Amount: 500, Currency: "EUR"})
	if err != nil || pay.Amount != 500 {
		t.Fatalf("create: %+v, %v", pay, err)
	}
	reqs := p.requests()
	if len(reqs) != 3 || reqs[0].Answer != 429 || reqs[1].Answer != 503 || reqs[2].Answer != 200 {
		t.Fatalf("requests %+v, want 429, 503, 200", reqs)
	}
	for _, r := range reqs {
		if r.IdempotencyKey != "01RETRY" {
			t.Errorf("a try with key %q", r.IdempotencyKey)
		}
	}
}

// A refused request (a 400) is not retried; a 404 is ErrNotFound.
func TestPermanentErrorsAreNotRetried(t *testing.T) {
	p := stripeMock(t)
	g := provider.Guard(client(p), fast)
	p.answer(canned{400, `{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"already refunded"}}`})
	if _, err := g.Refund(context.Background(), "pi_1", "k"); err == nil || provider.Retryable(err) {
		t.Fatalf("refund: %v, want a permanent error", err)
	}
	p.answer(canned{404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}`})
	if _, err := g.Lookup(context.Background(), "pi_nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("lookup: %v, want ErrNotFound", err)
	}
	if n := len(p.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

// A cancel Stripe refuses because the payment is no longer cancelable asks
// for the payment's state: succeeded is ErrAlreadySucceeded (the payment
// wins), canceled is a done cancel.
func TestCancelOfAPaymentThatSucceeded(t *testing.T) {
	p := stripeMock(t)
	c := client(p)
	unexpected := canned{400, `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"not cancelable"}}`}
	intent := func(status string) canned {
		return canned{200, `{"id":"pi_1","object":"payment_intent","amount":999,"currency":"eur","status":"` + status + `","metadata":{"order_id":"o1"}}`}
	}
	p.answer(unexpected, intent("succeeded"))
	pay, err := c.Cancel(context.Background(), "pi_1")
	if !errors.Is(err, provider.ErrAlreadySucceeded) || pay.Status != provider.Succeeded || pay.OrderID != "o1" {
		t.Fatalf("cancel: %+v, %v; want ErrAlreadySucceeded", pay, err)
	}
	// The latest charge, expanded, says when it succeeded: the saga judges that against pay_by.
	p.answer(unexpected, canned{200, `{"id":"pi_1","object":"payment_intent","amount":999,"currency":"eur","status":"succeeded",` +
		`"metadata":{"order_id":"o1"},"latest_charge":{"id":"ch_1","object":"charge","created":1767225600}}`})
	if pay, err := c.Cancel(context.Background(), "pi_1"); !errors.Is(err, provider.ErrAlreadySucceeded) ||
		!pay.SucceededAt.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("cancel: %+v, %v; want succeeded at 1767225600", pay, err)
	}
	p.answer(unexpected, intent("canceled"))
	if pay, err := c.Cancel(context.Background(), "pi_1"); err != nil || pay.Status != provider.Canceled {
		t.Fatalf("cancel of a canceled payment: %+v, %v", pay, err)
	}
	p.answer(unexpected, intent("processing"))
	if _, err := c.Cancel(context.Background(), "pi_1"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("cancel of a processing payment: %v, want ErrUnavailable (ask again)", err)
	}
}

// Stripe unreachable is ErrUnavailable: retried, then given up, still typed.
func TestUnreachableIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c := stripepay.New(stripepay.Config{Key: key, URL: "http://" + addr})
	limits := fast
	limits.Attempts = 2
	if _, err := provider.Guard(c, limits).Lookup(context.Background(), "pi_1"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("lookup: %v, want ErrUnavailable", err)
	}
}
