package standin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/standin"
	"github.com/seckill/seckill/payment/provider/stripepay"
)

const (
	key    = "sk_test_standin"
	secret = "whsec_standin_test"
)

// fast retries: the tests' waits are milliseconds.
var fast = provider.Limits{RPS: 1000, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}

// shop is a notification endpoint that verifies each event with the
// production client (stripe-go's webhook package) and hands it over; its
// first refuse answers are 500s.
type shop struct {
	srv    *httptest.Server
	events chan provider.Event
	refuse atomic.Int32
	posts  atomic.Int32
}

func newShop(t *testing.T) *shop {
	s := &shop{events: make(chan provider.Event, 100)}
	verifier := stripepay.New(stripepay.Config{Key: key, WebhookSecret: secret})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.posts.Add(1)
		body, _ := io.ReadAll(r.Body)
		ev, err := verifier.Verify(body, r.Header.Get(provider.SignatureHeader))
		if err != nil {
			t.Errorf("a notification the production verifier refuses: %v\n%s", err, body)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if s.refuse.Add(-1) >= 0 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		s.events <- ev
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// next is the next event taken, within a few seconds.
func (s *shop) next(t *testing.T) provider.Event {
	t.Helper()
	select {
	case ev := <-s.events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10 s")
		return provider.Event{}
	}
}

// standIn serves a stand-in notifying sh (when given) for the test.
func standIn(t *testing.T, sh *shop, o standin.Options) (*standin.Server, string) {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	o.BaseURL, o.WebhookSecret = "http://"+srv.Listener.Addr().String(), secret
	if sh != nil {
		o.WebhookURL = sh.srv.URL
	}
	if o.ResendAfter == 0 {
		o.ResendAfter = 20 * time.Millisecond
	}
	s := standin.New(o)
	srv.Config.Handler = s.Handler()
	srv.Start()
	t.Cleanup(func() { srv.Close(); s.Close() })
	return s, o.BaseURL
}

func client(base string) *stripepay.Client {
	return stripepay.New(stripepay.Config{Key: key, WebhookSecret: secret, URL: base})
}

func request(orderID string) provider.Request {
	return provider.Request{OrderID: orderID, Amount: 999, Currency: "EUR", PayBy: time.Now().Add(10 * time.Minute),
		ReturnURL: "http://shop.test/#/orders/" + orderID, Name: "Demo phone"}
}

// The shop's whole path through the production client: a session opened,
// its page, the test card, the notifications (verified by stripe-go), the
// payment looked up, a cancel that finds it paid, a refund (replayed
// under its key, refused under another), the lists and an event.
func TestCheckoutPaidRefundedThroughStripeGo(t *testing.T) {
	sh := newShop(t)
	// The PaymentIntent's success too (a shop may register it; not by default).
	_, base := standIn(t, sh, standin.Options{EventTypes: append(slices.Clone(standin.DefaultEventTypes), "payment_intent.succeeded")})
	c := provider.Guard(client(base), fast)
	ctx := context.Background()
	pay, err := c.Create(ctx, request("01ORDER"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(pay.ID, "cs_test_") || pay.CheckoutURL != base+"/pay/"+pay.ID || pay.Status != provider.Pending ||
		pay.Amount != 999 || pay.Currency != "EUR" || pay.OrderID != "01ORDER" {
		t.Fatalf("payment %+v", pay)
	}
	page := get(t, pay.CheckoutURL)
	if !strings.Contains(page, "Pay 9.99 EUR with a test card") || !strings.Contains(page, "Demo phone") ||
		!strings.Contains(page, `<form method="post" action="/pay/`+pay.ID+`">`) || !strings.Contains(page, `href="http://shop.test/#/orders/01ORDER"`) {
		t.Fatalf("checkout page:\n%s", page)
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noFollow.PostForm(pay.CheckoutURL, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "http://shop.test/#/orders/01ORDER" {
		t.Fatalf("the pay button: %s to %q", res.Status, res.Header.Get("Location"))
	}
	got := map[string]provider.Event{}
	for range 2 {
		ev := sh.next(t)
		got[ev.ProviderType] = ev
	}
	done, succeeded := got["checkout.session.completed"], got["payment_intent.succeeded"]
	if done.Type != provider.PaymentSucceeded || done.PaymentID != pay.ID || done.OrderID != "01ORDER" || done.Amount != 999 ||
		done.Currency != "EUR" || !strings.HasPrefix(done.PaymentIntentID, "pi_test_") {
		t.Fatalf("checkout.session.completed read as %+v", done)
	}
	if succeeded.Type != provider.PaymentSucceeded || succeeded.PaymentIntentID != done.PaymentIntentID || succeeded.OrderID != "01ORDER" {
		t.Fatalf("payment_intent.succeeded read as %+v", succeeded)
	}
	looked, err := c.Lookup(ctx, pay.ID)
	if err != nil || looked.Status != provider.Succeeded || looked.SucceededAt.IsZero() || looked.PaymentIntentID != done.PaymentIntentID {
		t.Fatalf("lookup: %+v %v", looked, err)
	}
	if p, err := c.Cancel(ctx, pay.ID); !errors.Is(err, provider.ErrAlreadySucceeded) || p.Status != provider.Succeeded || !p.SucceededAt.Equal(looked.SucceededAt) {
		t.Fatalf("cancel of a paid session: %+v %v, want ErrAlreadySucceeded", p, err)
	}
	r, err := c.Refund(ctx, pay.ID, "refund-"+pay.ID)
	if err != nil || r.Status != provider.RefundSucceeded || r.Amount != 999 || r.PaymentID != pay.ID {
		t.Fatalf("refund: %+v %v", r, err)
	}
	if again, err := c.Refund(ctx, pay.ID, "refund-"+pay.ID); err != nil || again.ID != r.ID {
		t.Fatalf("the refund asked again under its key: %+v %v, want %s", again, err, r.ID)
	}
	if _, err := c.Refund(ctx, pay.ID, "another key"); err == nil || provider.Retryable(err) || !strings.Contains(err.Error(), "already been refunded") {
		t.Fatalf("a second refund under another key: %v, want charge_already_refunded", err)
	}
	// What the books will read: the charges and refunds of the PaymentIntent, and an event.
	sc := stripe.NewClient(key, stripe.WithBackends(stripe.NewBackendsWithConfig(&stripe.BackendConfig{URL: stripe.String(base),
		LeveledLogger: &stripe.LeveledLogger{Level: stripe.LevelNull}})))
	var charges, refunds int
	for ch, err := range sc.V1Charges.List(ctx, &stripe.ChargeListParams{PaymentIntent: stripe.String(done.PaymentIntentID)}) {
		if err != nil || ch.Amount != 999 || ch.AmountRefunded != 999 || !ch.Refunded {
			t.Fatalf("charge %+v %v", ch, err)
		}
		charges++
	}
	for re, err := range sc.V1Refunds.List(ctx, &stripe.RefundListParams{PaymentIntent: stripe.String(done.PaymentIntentID)}) {
		if err != nil || re.ID != r.ID || re.Status != stripe.RefundStatusSucceeded {
			t.Fatalf("refund %+v %v", re, err)
		}
		refunds++
	}
	if charges != 1 || refunds != 1 {
		t.Fatalf("%d charges, %d refunds listed", charges, refunds)
	}
	if ev, err := sc.V1Events.Retrieve(ctx, done.ID, nil); err != nil || ev.Type != "checkout.session.completed" {
		t.Fatalf("event %s: %+v %v", done.ID, ev, err)
	}
}

func get(t *testing.T, u string) string {
	t.Helper()
	res, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// The close at pay_by: Cancel expires the open session
// (checkout.session.expired, a cancel); asked again it is still canceled;
// the test card then finds it closed.
func TestExpire(t *testing.T) {
	sh := newShop(t)
	_, base := standIn(t, sh, standin.Options{})
	c := provider.Guard(client(base), fast)
	ctx := context.Background()
	pay, err := c.Create(ctx, request("01EXPIRE"))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if p, err := c.Cancel(ctx, pay.ID); err != nil || p.Status != provider.Canceled {
			t.Fatalf("cancel: %+v %v", p, err)
		}
	}
	if ev := sh.next(t); ev.Type != provider.PaymentCanceled || ev.PaymentID != pay.ID || ev.ProviderType != "checkout.session.expired" {
		t.Fatalf("event %+v", ev)
	}
	if _, err := standin.NewAdmin(base, key, nil).Pay(ctx, pay.ID); !errors.Is(err, standin.ErrClosed) {
		t.Fatalf("pay of an expired session: %v, want ErrClosed", err)
	}
	if page := get(t, base+"/pay/"+pay.ID); !strings.Contains(page, "has expired") {
		t.Fatalf("page of an expired session:\n%s", page)
	}
	if _, err := c.Refund(ctx, pay.ID, "k"); err == nil || provider.Retryable(err) {
		t.Fatalf("refund of an unpaid session: %v, want a permanent error", err)
	}
	calls, err := standin.NewAdmin(base, key, nil).Calls(ctx, "/v1/checkout/sessions/"+pay.ID+"/expire")
	if err != nil || len(calls) != 2 || calls[0].Status != 200 || calls[1].Status != 400 {
		t.Fatalf("expire calls %+v %v: want one done, one refused", calls, err)
	}
}

// A session past its expires_at expires by itself, as Stripe's: the
// sweeper sends checkout.session.expired.
func TestSessionExpiresAtItsTime(t *testing.T) {
	sh := newShop(t)
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	_, base := standIn(t, sh, standin.Options{Now: clock})
	pay, err := client(base).Create(context.Background(), request("01LATE"))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	now = now.Add(2 * time.Hour)
	mu.Unlock()
	if ev := sh.next(t); ev.ProviderType != "checkout.session.expired" || ev.PaymentID != pay.ID {
		t.Fatalf("event %+v", ev)
	}
}

// The same idempotency key and parameters: the first answer (the same
// session); other parameters: idempotency_error, not retried; an
// expires_at outside 30 min..24 h and an unknown parameter are refused.
func TestIdempotencyAndRefusals(t *testing.T) {
	_, base := standIn(t, nil, standin.Options{})
	c := provider.Guard(client(base), fast)
	ctx := context.Background()
	r := request("01SAME")
	a, err := c.Create(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.Create(ctx, r); err != nil || b.ID != a.ID {
		t.Fatalf("the create replayed: %+v %v, want %s", b, err, a.ID)
	}
	r.Amount = 1999
	if _, err := c.Create(ctx, r); err == nil || provider.Retryable(err) || !strings.Contains(err.Error(), "idempotency") {
		t.Fatalf("the key with another amount: %v, want idempotency_error", err)
	}
	r = request("01SOON")
	r.ExpiresAt = time.Now().Add(10 * time.Minute)
	if _, err := c.Create(ctx, r); err == nil || provider.Retryable(err) || !strings.Contains(err.Error(), "30 minutes") {
		t.Fatalf("expires_at in 10 min: %v, want refused", err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/checkout/sessions", strings.NewReader("mode=payment&allow_promotion_codes=true&discounts[0][coupon]=X"))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), `"code":"parameter_unknown"`) {
		t.Fatalf("an unknown parameter: %s %s", res.Status, body)
	}
}

// Keys: any sk_test_ key by default, only the configured ones when given;
// a refused key is 401, not retried.
func TestKeys(t *testing.T) {
	ctx := context.Background()
	_, base := standIn(t, nil, standin.Options{})
	for k, ok := range map[string]bool{"sk_test_anything": true, "sk_live_real": false, "": false} {
		_, err := stripepay.New(stripepay.Config{Key: k, URL: base}).Lookup(ctx, "cs_nope")
		if got := !strings.Contains(err.Error(), "401"); got != ok {
			t.Errorf("key %q: %v", k, err)
		}
	}
	_, base = standIn(t, nil, standin.Options{Keys: []string{"sk_test_only"}})
	if _, err := stripepay.New(stripepay.Config{Key: "sk_test_other", URL: base}).Lookup(ctx, "cs_nope"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a key not configured: %v", err)
	}
	if _, err := stripepay.New(stripepay.Config{Key: "sk_test_only", URL: base}).Lookup(ctx, "cs_nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("the configured key: %v, want ErrNotFound", err)
	}
}

// Past its rate the stand-in answers 429 rate_limit (ErrRateLimited);
// Guard's retries get every call through.
func TestRateLimit(t *testing.T) {
	_, base := standIn(t, nil, standin.Options{RPS: 5})
	ctx := context.Background()
	raw := client(base)
	limited := 0
	for range 20 {
		if _, err := raw.Lookup(ctx, "cs_nope"); errors.Is(err, provider.ErrRateLimited) {
			limited++
		}
	}
	if limited < 10 {
		t.Fatalf("%d of 20 calls at once limited at 5/s, want most", limited)
	}
	guarded := provider.Guard(raw, provider.Limits{RPS: 1000, Attempts: 20, BaseDelay: 50 * time.Millisecond, MaxDelay: 300 * time.Millisecond})
	for range 8 {
		if _, err := guarded.Lookup(ctx, "cs_nope"); !errors.Is(err, provider.ErrNotFound) {
			t.Fatalf("guarded: %v, want ErrNotFound after retries", err)
		}
	}
}

// The refund knobs: FailRefunds fails calls with a 500 having done nothing
// (Guard's retry refunds once); PendingRefunds answers pending, settled
// succeeded at the lookup; FailingRefunds pending, then failed, after which
// the payment can be refunded under another key.
func TestRefundKnobs(t *testing.T) {
	s, base := standIn(t, nil, standin.Options{})
	c := provider.Guard(client(base), fast)
	ctx := context.Background()
	admin := standin.NewAdmin(base, key, nil)
	paid := func(order string) string {
		pay, err := c.Create(ctx, request(order))
		if err == nil {
			_, err = admin.Pay(ctx, pay.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		return pay.ID
	}
	a := paid("01FAIL")
	if err := admin.SetKnobs(ctx, standin.Knobs{FailRefunds: 2}); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Refund(ctx, a, "refund-a"); err != nil || r.Status != provider.RefundSucceeded {
		t.Fatalf("refund through two failures: %+v %v", r, err)
	}
	calls, _ := admin.Calls(ctx, "/v1/refunds")
	if len(calls) != 3 || calls[0].Status != 500 || calls[1].Status != 500 || calls[2].Status != 200 {
		t.Fatalf("refund calls %+v: want 500, 500, 200", calls)
	}
	s.SetKnobs(standin.Knobs{PendingRefunds: 1, FailingRefunds: 1})
	b := paid("01PENDING")
	r, err := c.Refund(ctx, b, "refund-b")
	if err != nil || r.Status != provider.RefundPending {
		t.Fatalf("pending refund: %+v %v", r, err)
	}
	if again, err := c.Refund(ctx, b, "refund-b"); err != nil || again.Status != provider.RefundPending {
		t.Fatalf("asked again under its key: %+v %v, want the first answer, pending", again, err)
	}
	if got, err := c.LookupRefund(ctx, r.ID); err != nil || got.Status != provider.RefundSucceeded {
		t.Fatalf("lookup of the pending refund: %+v %v", got, err)
	}
	d := paid("01FAILING")
	r, err = c.Refund(ctx, d, "refund-d")
	if err != nil || r.Status != provider.RefundPending {
		t.Fatalf("failing refund: %+v %v", r, err)
	}
	if got, err := c.LookupRefund(ctx, r.ID); err != nil || got.Status != provider.RefundFailed {
		t.Fatalf("lookup of the failing refund: %+v %v", got, err)
	}
	if again, err := c.Refund(ctx, d, "refund-d-2"); err != nil || again.Status != provider.RefundSucceeded {
		t.Fatalf("refund after a failed one: %+v %v", again, err)
	}
}

// Webhooks: resent until answered 2xx, signed at each send; Duplicate
// sends an event twice with one id; Drop sends nothing.
func TestWebhookResendsAndKnobs(t *testing.T) {
	sh := newShop(t)
	s, base := standIn(t, sh, standin.Options{})
	c := client(base)
	ctx := context.Background()
	admin := standin.NewAdmin(base, key, nil)
	sh.refuse.Store(2)
	pay, err := c.Create(ctx, request("01RESEND"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, pay.ID); err != nil {
		t.Fatal(err)
	}
	if ev := sh.next(t); ev.PaymentID != pay.ID || sh.posts.Load() != 3 {
		t.Fatalf("event %+v after %d posts, want the third", ev, sh.posts.Load())
	}
	s.SetKnobs(standin.Knobs{Duplicate: 1})
	pay, _ = c.Create(ctx, request("01TWICE"))
	if _, err := c.Cancel(ctx, pay.ID); err != nil {
		t.Fatal(err)
	}
	if a, b := sh.next(t), sh.next(t); a.ID != b.ID || a.PaymentID != pay.ID {
		t.Fatalf("duplicate: %+v, %+v", a, b)
	}
	if err := admin.SetKnobs(ctx, standin.Knobs{Drop: 1}); err != nil {
		t.Fatal(err)
	}
	pay, _ = c.Create(ctx, request("01DROP"))
	if _, err := admin.Pay(ctx, pay.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-sh.events:
		t.Fatalf("a dropped event arrived: %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	if p, err := c.Lookup(ctx, pay.ID); err != nil || p.Status != provider.Succeeded {
		t.Fatalf("the payment of a dropped event: %+v %v, want succeeded (only Lookup tells)", p, err)
	}
}
