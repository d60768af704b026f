package testpay_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
)

// served is a test provider behind its real Handler, and a client of it.
func served(t *testing.T, k testpay.Knobs) (*testpay.Provider, *testpay.Client, string) {
	p := newProvider(t, &receiver{}, k)
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(srv.Close)
	return p, testpay.NewClient(srv.URL+"/", secret, srv.Client()), srv.URL
}

// Every route of the API through the client: the provider's answers and
// typed errors come back as they were given.
func TestClientRoutes(t *testing.T) {
	p, c, _ := served(t, testpay.Knobs{})
	ctx := context.Background()
	req := provider.Request{OrderID: "o1", Amount: 999, Currency: "EUR", PayBy: time.Now().Add(time.Hour), ReturnURL: "http://shop.test/o1"}
	a, err := c.Create(ctx, req)
	if err != nil || a.Status != provider.Pending || a.CheckoutURL != "http://pay.test/pay/"+a.ID || a.OrderID != "o1" || a.Amount != 999 {
		t.Fatalf("create: %+v, %v", a, err)
	}
	if b, err := c.Create(ctx, req); err != nil || b != a {
		t.Fatalf("second create: %+v, %v, want %+v", b, err, a)
	}
	req.Amount = 1000
	if _, err := c.Create(ctx, req); err == nil || errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("the same order with another amount: %v, want a refusal", err)
	}
	if l, err := c.Lookup(ctx, a.ID); err != nil || l != a {
		t.Fatalf("lookup: %+v, %v", l, err)
	}
	if _, err := c.Lookup(ctx, "pi_nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("lookup of an unknown payment: %v", err)
	}
	paid, err := c.Pay(ctx, a.ID)
	if err != nil || paid.Status != provider.Succeeded || paid.SucceededAt.IsZero() {
		t.Fatalf("pay: %+v, %v", paid, err)
	}
	if l, _ := p.Lookup(ctx, a.ID); !l.SucceededAt.Equal(paid.SucceededAt) {
		t.Fatalf("the provider has %+v, the client %+v", l, paid)
	}
	won, err := c.Cancel(ctx, a.ID)
	if !errors.Is(err, provider.ErrAlreadySucceeded) || won.ID != a.ID || won.Status != provider.Succeeded {
		t.Fatalf("cancel of a paid payment: %+v, %v", won, err)
	}
	b, _ := c.Create(ctx, provider.Request{OrderID: "o2", Amount: 500, Currency: "EUR"})
	if got, err := c.Cancel(ctx, b.ID); err != nil || got.Status != provider.Canceled {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	if got, err := c.Pay(ctx, b.ID); !errors.Is(err, testpay.ErrClosed) || got.Status != provider.Canceled {
		t.Fatalf("pay of a canceled payment: %+v, %v", got, err)
	}

	if err := c.SetKnobs(ctx, testpay.Knobs{FailRefunds: 1, Delay: 1500 * time.Millisecond, Duplicate: 0.2}); err != nil {
		t.Fatal(err)
	}
	if k, err := c.Knobs(ctx); err != nil || k != (testpay.Knobs{FailRefunds: 1, Delay: 1500 * time.Millisecond, Duplicate: 0.2, ReorderBy: time.Second}) || p.Knobs() != k {
		t.Fatalf("knobs: %+v, %v", k, err)
	}
	if _, err := c.Refund(ctx, a.ID, "k1"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("refund under FailRefunds: %v", err)
	}
	r, err := c.Refund(ctx, a.ID, "k1")
	if err != nil || r.PaymentID != a.ID || r.Amount != 999 || r.Status != provider.RefundSucceeded {
		t.Fatalf("refund: %+v, %v", r, err)
	}
	if again, err := c.Refund(ctx, a.ID, "k1"); err != nil || again != r {
		t.Fatalf("refund again: %+v, %v", again, err)
	}
	if _, err := c.Refund(ctx, b.ID, "k2"); err == nil || errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("refund of a canceled payment: %v, want a refusal", err)
	}
}

// The API wants the secret; the checkout pages stay public. Knobs are sent
// as Go duration strings.
func TestClientAuth(t *testing.T) {
	p, _, base := served(t, testpay.Knobs{})
	ctx := context.Background()
	a := create(t, p, "o1")
	if _, err := testpay.NewClient(base, "whsec_other", nil).Lookup(ctx, a.ID); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("another secret: %v, want 401", err)
	}
	for _, h := range []string{"", "Bearer ", "Bearer whsec_other", secret} {
		req, _ := http.NewRequest(http.MethodGet, base+"/v1/payments/"+a.ID, nil)
		if h != "" {
			req.Header.Set("Authorization", h)
		}
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: %v %v", h, resp, err)
		} else {
			_ = resp.Body.Close()
		}
	}
	if resp, err := http.Get(base + "/pay/" + a.ID); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the checkout page: %v %v", resp, err)
	} else {
		_ = resp.Body.Close()
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/v1/knobs", strings.NewReader(`{"delay":"2s","reorder":0.5,"reorder_by":"300ms","drop":0.1}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT /v1/knobs: %v %v", resp, err)
	}
	_ = resp.Body.Close()
	if k := p.Knobs(); k != (testpay.Knobs{Delay: 2 * time.Second, Reorder: 0.5, ReorderBy: 300 * time.Millisecond, Drop: 0.1}) {
		t.Fatalf("knobs %+v", k)
	}
	req, _ = http.NewRequest(http.MethodPut, base+"/v1/knobs", strings.NewReader(`{"delay":"soon"}`))
	req.Header.Set("Authorization", "Bearer "+secret)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("a bad duration: %v %v", resp, err)
	}
	_ = resp.Body.Close()
}

// What a provider asks to be retried: a 429 is ErrRateLimited; a 5xx and a
// provider that cannot be reached are ErrUnavailable.
func TestClientErrorMapping(t *testing.T) {
	status := http.StatusTooManyRequests
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) }))
	c := testpay.NewClient(srv.URL, secret, nil)
	ctx := context.Background()
	if _, err := c.Lookup(ctx, "pi_1"); !errors.Is(err, provider.ErrRateLimited) {
		t.Fatalf("429: %v", err)
	}
	status = http.StatusBadGateway
	if _, err := c.Cancel(ctx, "pi_1"); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("502: %v", err)
	}
	srv.Close()
	if _, err := c.Create(ctx, provider.Request{OrderID: "o1", Amount: 1, Currency: "EUR"}); !errors.Is(err, provider.ErrUnavailable) {
		t.Fatalf("no provider: %v", err)
	}
}

// Verify is local: the client checks a notification signed with the shared
// secret, and refuses another secret's.
func TestClientVerify(t *testing.T) {
	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded","created":1,"data":{"object":{"id":"pi_1","object":"payment_intent","amount":999,"currency":"eur","status":"succeeded","metadata":{"order_id":"o1"}}}}`)
	c := testpay.NewClient("http://pay.test", secret, nil)
	if e, err := c.Verify(body, provider.Sign(body, secret, time.Now())); err != nil || e.PaymentID != "pi_1" || e.Type != provider.PaymentSucceeded {
		t.Fatalf("verify: %+v, %v", e, err)
	}
	if _, err := c.Verify(body, provider.Sign(body, "whsec_other", time.Now())); !errors.Is(err, provider.ErrBadSignature) {
		t.Fatalf("another secret: %v", err)
	}
}
