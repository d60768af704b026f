package cashier_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
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

// Checkout through Stripe (stripe-mock) opens a Checkout Session of the
// item's amount, currency and name, the order id its idempotency key and
// metadata, and answers its page: the payments row holds the session id
// and the url the storefront sends the buyer to.
func TestCheckoutThroughStripe(t *testing.T) {
	base, seen := startStripeMock(t)
	now := time.Now()
	payBy := now.Add(time.Minute)
	st := &fakeStore{row: &store.Order{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusPendingPayment, PayBy: &payBy},
		item: store.Item{ID: 3, Name: "Demo phone", PriceCents: 999, Currency: "EUR"}}
	c := cashierWith(st, provider.Guard(stripepay.New(stripepay.Config{Key: "sk_test_123", WebhookSecret: secret, URL: base}), provider.Limits{}))
	co, err := c.Checkout(context.Background(), orderID, 7, now)
	if err != nil || !strings.HasPrefix(co.PaymentID, "cs_") || co.CheckoutURL == "" || co.Amount != 999 || co.Currency != "EUR" {
		t.Fatalf("checkout %+v %v", co, err)
	}
	if len(st.payments) != 1 || st.payments[0].ProviderPaymentID != co.PaymentID || st.payments[0].CheckoutURL != co.CheckoutURL {
		t.Fatalf("payments rows %+v", st.payments)
	}
	reqs := seen()
	if len(reqs) != 1 {
		t.Fatalf("%d requests to Stripe", len(reqs))
	}
	r := reqs[0]
	if r.URL.Path != "/v1/checkout/sessions" || r.Header.Get("Idempotency-Key") != orderID || r.Form.Get("line_items[0][price_data][unit_amount]") != "999" ||
		r.Form.Get("line_items[0][price_data][currency]") != "eur" || r.Form.Get("line_items[0][price_data][product_data][name]") != "Demo phone" ||
		r.Form.Get("metadata[order_id]") != orderID || r.Form.Get("payment_intent_data[metadata][order_id]") != orderID {
		t.Fatalf("create request %s %v key %q", r.URL.Path, r.Form, r.Header.Get("Idempotency-Key"))
	}
}

// Stripe's notifications, read by stripepay: a session's event is about
// the session the payments row holds; a PaymentIntent's is about the
// order's payment, found by the order id its metadata carries; a
// PaymentIntent of an order with no payment here stays unknown.
func TestNotifyOfStripeCheckout(t *testing.T) {
	now := time.Now()
	st := &fakeStore{payments: []store.Payment{{OrderID: orderID, ProviderPaymentID: "cs_test_1"}},
		result: store.EventResult{Verdict: store.VerdictPaid, Order: store.Order{OrderID: orderID, Status: order.StatusPaid}}}
	c := cashierWith(st, stripepay.New(stripepay.Config{Key: "sk_test_123", WebhookSecret: secret}))
	sign := func(b []byte) string {
		return webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: b, Secret: secret, Timestamp: now}).Header
	}
	created := strconv.FormatInt(now.Unix(), 10)
	session := []byte(`{"id":"evt_cs","object":"event","type":"checkout.session.completed","created":` + created +
		`,"data":{"object":{"id":"cs_test_1","object":"checkout.session","status":"complete","payment_status":"paid","amount_total":999,` +
		`"currency":"eur","client_reference_id":"` + orderID + `","metadata":{"order_id":"` + orderID + `"},"payment_intent":"pi_test_1"}}}`)
	intent := func(order string) []byte {
		return []byte(`{"id":"evt_pi","object":"event","type":"payment_intent.succeeded","created":` + created +
			`,"data":{"object":{"id":"pi_test_1","object":"payment_intent","amount":999,"currency":"eur","status":"succeeded",` +
			`"metadata":{"order_id":"` + order + `"}}}}`)
	}
	for _, body := range [][]byte{session, intent(orderID)} {
		if out, err := c.Notify(context.Background(), body, sign(body)); err != nil || out != "paid" {
			t.Fatalf("%s: %s %v", body, out, err)
		}
	}
	if len(st.events) != 2 {
		t.Fatalf("events %+v", st.events)
	}
	for _, e := range st.events {
		if e.PaymentID != "cs_test_1" || e.OrderID != orderID || e.Amount != 999 || e.Currency != "EUR" || e.Provider != "stripe" {
			t.Errorf("event %+v, want about the session cs_test_1", e)
		}
	}
	other := intent("01OTHERORDER")
	if _, err := c.Notify(context.Background(), other, sign(other)); err != nil || st.events[2].PaymentID != "pi_test_1" {
		t.Fatalf("a PaymentIntent of an order without a payment: %+v %v", st.events[2], err)
	}
}
