package cashier_test

import (
	"bytes"
	"context"
	"github.com/seckill/seckill/testkit"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/store"
)

// startStripeMock runs stripe-mock on a free port for t, behind a proxy
// that records each request's form and idempotency key. Skipped under
// -short or without the binary (SECKILL_REQUIRE_STRIPE_MOCK=1: a failure).
func startStripeMock(t *testing.T) (base string, seen func() []*http.Request) {
	t.Helper()
	bin := testkit.StripeMockBin(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, "-http-addr", addr, "-https-addr", freeAddr(t))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("stripe-mock did not listen within 20 s")
		}
	}
	target, _ := url.Parse("http://" + addr)
	rp := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var reqs []*http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		c := r.Clone(r.Context())
		c.Body = io.NopCloser(bytes.NewReader(body))
		_ = c.ParseForm()
		mu.Lock()
		reqs = append(reqs, c)
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []*http.Request { mu.Lock(); defer mu.Unlock(); return append([]*http.Request(nil), reqs...) }
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// Checkout through Stripe (stripe-mock) creates a PaymentIntent of the
// item's amount and currency, the order id its idempotency key and metadata.
func TestCheckoutThroughStripe(t *testing.T) {
	base, seen := startStripeMock(t)
	now := time.Now()
	payBy := now.Add(time.Minute)
	st := &fakeStore{row: &store.Order{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusPendingPayment, PayBy: &payBy},
		item: store.Item{ID: 3, PriceCents: 999, Currency: "EUR"}}
	c := cashierWith(st, provider.Guard(stripepay.New(stripepay.Config{Key: "sk_test_123", WebhookSecret: secret, URL: base}), provider.Limits{}))
	co, err := c.Checkout(context.Background(), orderID, 7, now)
	if err != nil || !strings.HasPrefix(co.PaymentID, "pi_") || co.Amount != 999 || co.Currency != "EUR" {
		t.Fatalf("checkout %+v %v", co, err)
	}
	reqs := seen()
	if len(reqs) != 1 {
		t.Fatalf("%d requests to Stripe", len(reqs))
	}
	r := reqs[0]
	if r.URL.Path != "/v1/payment_intents" || r.Header.Get("Idempotency-Key") != orderID || r.Form.Get("amount") != "999" ||
		r.Form.Get("currency") != "eur" || r.Form.Get("metadata[order_id]") != orderID {
		t.Fatalf("create request %s %v key %q", r.URL.Path, r.Form, r.Header.Get("Idempotency-Key"))
	}
}
