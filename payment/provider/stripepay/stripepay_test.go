package stripepay_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
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

// Create opens a Checkout Session stripe-mock accepts: payment mode, one
// line of the amount in minor units and the currency in Stripe's lower
// case (quantity 1), card only, no promotion codes, adaptive pricing off,
// the order id as idempotency key, client_reference_id and in the
// session's and its PaymentIntent's metadata beside pay_by, the return URL
// as success and cancel URL, expires_at SessionExpiry; the answer reads
// back as a pending payment with its page.
func TestCreate(t *testing.T) {
	p := stripeMock(t)
	payBy := time.Now().Add(10 * time.Minute).Truncate(time.Second).UTC()
	pay, err := client(p).Create(context.Background(), provider.Request{OrderID: "01ORDER", Amount: 999, Currency: "EUR", PayBy: payBy,
		ReturnURL: "http://shop.test/#/orders/01ORDER", Name: "Demo phone"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pay.ID, "cs_") || pay.CheckoutURL == "" || pay.Amount != 999 || pay.Currency != "EUR" || pay.OrderID != "01ORDER" || pay.Status != provider.Pending {
		t.Fatalf("payment %+v", pay)
	}
	reqs := p.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1: %+v", len(reqs), reqs)
	}
	r := reqs[0]
	if r.Method != "POST" || r.Path != "/v1/checkout/sessions" || r.IdempotencyKey != "01ORDER" || r.Answer != 200 {
		t.Fatalf("request %+v", r)
	}
	want := map[string]string{"mode": "payment", "line_items[0][quantity]": "1",
		"line_items[0][price_data][unit_amount]": "999", "line_items[0][price_data][currency]": "eur",
		"line_items[0][price_data][product_data][name]": "Demo phone",
		"payment_method_types[0]":                       "card", "allow_promotion_codes": "false", "adaptive_pricing[enabled]": "false",
		"client_reference_id": "01ORDER", "metadata[order_id]": "01ORDER", "metadata[pay_by]": payBy.Format(time.RFC3339),
		"payment_intent_data[metadata][order_id]": "01ORDER", "payment_intent_data[metadata][pay_by]": payBy.Format(time.RFC3339),
		"success_url": "http://shop.test/#/orders/01ORDER", "cancel_url": "http://shop.test/#/orders/01ORDER",
		"expires_at": strconv.FormatInt(payBy.Add(31*time.Minute).Unix(), 10)}
	for k, w := range want {
		if got := r.Form.Get(k); got != w {
			t.Errorf("form %s = %q, want %q", k, got, w)
		}
	}
	for k := range r.Form {
		if _, ok := want[k]; !ok {
			t.Errorf("form %s = %q: not asked for", k, r.Form.Get(k))
		}
	}
	// A caller's key and expiry are sent as given.
	at := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	if _, err := client(p).Create(context.Background(), provider.Request{OrderID: "01ORDER", Amount: 999, Currency: "EUR", PayBy: payBy,
		IdempotencyKey: "checkout-01ORDER", ExpiresAt: at}); err != nil {
		t.Fatal(err)
	}
	if r := p.requests()[1]; r.IdempotencyKey != "checkout-01ORDER" || r.Form.Get("expires_at") != strconv.FormatInt(at.Unix(), 10) ||
		r.Form.Get("line_items[0][price_data][product_data][name]") != "Order 01ORDER" || r.Form.Has("success_url") {
		t.Fatalf("request %+v", r)
	}
}

// A session may expire only 30 min to 24 h after its creation: pay_by +
// 31 min, the same for every checkout before pay_by, inside those bounds.
func TestSessionExpiry(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		payBy, want time.Time
	}{
		{now.Add(15 * time.Minute), now.Add(46 * time.Minute)},
		{now.Add(2 * time.Hour), now.Add(2*time.Hour + 31*time.Minute)},
		{now.Add(30 * time.Hour), now.Add(24*time.Hour - time.Minute)}, // capped
		{now.Add(-time.Minute), now.Add(31 * time.Minute)},             // past: the least Stripe takes
	} {
		got := stripepay.SessionExpiry(c.payBy, now)
		if !got.Equal(c.want) {
			t.Errorf("pay_by %s: %s, want %s", c.payBy, got, c.want)
		}
		if d := got.Sub(now); d < stripepay.MinSessionLife || d > stripepay.MaxSessionLife {
			t.Errorf("pay_by %s: %s out of Stripe's bounds", c.payBy, d)
		}
	}
	// Two checkouts of one order minutes apart send the same expires_at.
	payBy := now.Add(20 * time.Minute)
	if a, b := stripepay.SessionExpiry(payBy, now), stripepay.SessionExpiry(payBy, now.Add(19*time.Minute)); !a.Equal(b) {
		t.Errorf("expiry moved with the checkout's time: %s, %s", a, b)
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

// A Checkout Session's id: Cancel expires it, Lookup reads it with its
// PaymentIntent's latest charge, Refund refunds its PaymentIntent (read
// from the session) under the caller's key, naming the session.
func TestSessionCancelLookupRefund(t *testing.T) {
	p := stripeMock(t)
	c := client(p)
	ctx := context.Background()
	// stripe-mock answers its fixture session, whatever the id asked.
	if pay, err := c.Cancel(ctx, "cs_123"); err != nil || !strings.HasPrefix(pay.ID, "cs_") {
		t.Fatalf("cancel: %+v, %v", pay, err)
	}
	if pay, err := c.Lookup(ctx, "cs_123"); err != nil || !strings.HasPrefix(pay.ID, "cs_") {
		t.Fatalf("lookup: %+v, %v", pay, err)
	}
	p.answer(canned{200, `{"id":"cs_123","object":"checkout.session","status":"complete","payment_status":"paid",` +
		`"amount_total":999,"currency":"eur","payment_intent":"pi_123","metadata":{"order_id":"o1"}}`})
	r, err := c.Refund(ctx, "cs_123", "refund-cs_123")
	if err != nil || r.ID == "" || r.PaymentID != "cs_123" || r.Status != provider.RefundSucceeded {
		t.Fatalf("refund: %+v, %v", r, err)
	}
	reqs := p.requests()
	want := []request{{Method: "POST", Path: "/v1/checkout/sessions/cs_123/expire"}, {Method: "GET", Path: "/v1/checkout/sessions/cs_123"},
		{Method: "GET", Path: "/v1/checkout/sessions/cs_123"}, {Method: "POST", Path: "/v1/refunds", IdempotencyKey: "refund-cs_123"}}
	if len(reqs) != len(want) {
		t.Fatalf("requests %+v", reqs)
	}
	for i, w := range want {
		if g := reqs[i]; g.Method != w.Method || g.Path != w.Path || g.Answer != 200 || (w.IdempotencyKey != "" && g.IdempotencyKey != w.IdempotencyKey) {
			t.Errorf("request %d: %+v, want %+v", i, g, w)
		}
	}
	if got := reqs[1].Query.Get("expand[0]"); got != "payment_intent.latest_charge" {
		t.Errorf("lookup expands %v, want the PaymentIntent's latest charge", reqs[1].Query)
	}
	if got := reqs[3].Form.Get("payment_intent"); got != "pi_123" {
		t.Errorf("refund of %q, want the session's PaymentIntent", got)
	}
	// A session nobody paid has no PaymentIntent: nothing to refund, for good.
	p.answer(canned{200, `{"id":"cs_9","object":"checkout.session","status":"expired","payment_status":"unpaid","payment_intent":null}`})
	if _, err := c.Refund(ctx, "cs_9", "k"); err == nil || provider.Retryable(err) {
		t.Fatalf("refund of an unpaid session: %v, want a permanent error", err)
	}
}

// A session Stripe will not expire is looked up: complete and paid is
// ErrAlreadySucceeded with the payment and its success time (the latest
// charge's creation), expired a done cancel, complete but unpaid or still
// open ErrUnavailable (ask again).
func TestCancelOfASessionThatCompleted(t *testing.T) {
	p := stripeMock(t)
	c := client(p)
	refused := canned{400, `{"error":{"type":"invalid_request_error","message":"Only Checkout Sessions with a status in [\"open\"] can be expired."}}`}
	session := func(status, paid, intent string) canned {
		return canned{200, `{"id":"cs_1","object":"checkout.session","status":"` + status + `","payment_status":"` + paid + `",` +
			`"amount_total":999,"currency":"eur","client_reference_id":"o1","metadata":{"order_id":"o1"},"payment_intent":` + intent + `}`}
	}
	p.answer(refused, session("complete", "paid", `{"id":"pi_1","object":"payment_intent","latest_charge":{"id":"ch_1","object":"charge","created":1767225600}}`))
	pay, err := c.Cancel(context.Background(), "cs_1")
	if !errors.Is(err, provider.ErrAlreadySucceeded) || pay.Status != provider.Succeeded || pay.OrderID != "o1" || pay.Amount != 999 ||
		pay.Currency != "EUR" || pay.PaymentIntentID != "pi_1" || !pay.SucceededAt.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("cancel: %+v, %v; want ErrAlreadySucceeded at 1767225600", pay, err)
	}
	p.answer(refused, session("expired", "unpaid", "null"))
	if pay, err := c.Cancel(context.Background(), "cs_1"); err != nil || pay.Status != provider.Canceled {
		t.Fatalf("cancel of an expired session: %+v, %v", pay, err)
	}
	for _, s := range []canned{session("complete", "unpaid", `"pi_1"`), session("open", "unpaid", "null")} {
		p.answer(refused, s)
		if _, err := c.Cancel(context.Background(), "cs_1"); !errors.Is(err, provider.ErrUnavailable) {
			t.Fatalf("cancel of %s: %v, want ErrUnavailable (ask again)", s.body, err)
		}
	}
	// A session unknown to Stripe: ErrNotFound, it can never succeed.
	p.answer(canned{404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such checkout.session"}}`})
	if _, err := c.Cancel(context.Background(), "cs_nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("cancel of an unknown session: %v, want ErrNotFound", err)
	}
}

// A 429 and a 503 are retried by Guard with the order id as the same
// idempotency key each time, and the third try's answer is the payment.
func TestRetriesRateLimitAndOutageWithTheSameKey(t *testing.T) {
	p := stripeMock(t)
	p.answer(canned{429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`},
		canned{503, `{"error":{"type":"api_error","message":"unavailable"}}`})
	pay, err := provider.Guard(client(p), fast).Create(context.Background(), provider.Request{OrderID: "01RETRY", Amount: 500, Currency: "EUR",
		PayBy: time.Now().Add(time.Minute)})
	if err != nil || pay.Amount != 500 {
		t.Fatalf("create: %+v, %v", pay, err)
	}
	reqs := p.requests()
	if len(reqs) != 3 || reqs[0].Answer != 429 || reqs[1].Answer != 503 || reqs[2].Answer != 200 {
		t.Fatalf("requests %+v, want 429, 503, 200", reqs)
	}
	for _, r := range reqs {
		if r.IdempotencyKey != "01RETRY" || r.Form.Encode() != reqs[0].Form.Encode() {
			t.Errorf("a try with key %q and form %v, want the first's", r.IdempotencyKey, r.Form)
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
