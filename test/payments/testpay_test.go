// Package payments_test runs the payment providers as separate processes on
// the real services, reaching each other over HTTP only: Stripe's code path
// against the Stripe stand-in (`seckill-stripe`, as make run does), and the
// test provider (`seckill testpay`), each with `seckill api` and `seckill
// worker`.
package payments_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

const (
	jwtSecret = "payments-test-secret-0123456789abcdef"
	tpSecret  = "whsec_payments_test"
)

// Under SECKILL_PAYMENT_PROVIDER=testpay, with the provider in a process of
// its own: (a) a checkout paid on the provider's page (its button) makes
// the order PAID through the notification; (c) a buyer's POST …/pay is the
// instant test card, 200 PAID after the door's decision, the payment
// succeeded, and the notification that follows is already_paid by the same
// payment, refunding nothing; (b) an order checked out and never paid is
// canceled at the provider by the worker's saga at pay_by, its unit given
// back.
func TestTestProviderAcrossProcesses(t *testing.T) {
	testkit.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	s.Temporal(ctx, t, testkit.Logger(t))
	bin := testkit.SeckillBinary(t)
	tpAddr, apiAddr, workerAddr := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	tpURL, apiURL := "http://"+tpAddr, "http://"+apiAddr
	// The test provider runs only on a development machine (SECKILL_DEV).
	env := s.Env("SECKILL_DEV=1", "SECKILL_JWT_SECRET="+jwtSecret, "SECKILL_PAYMENT_PROVIDER=testpay",
		"SECKILL_PAYMENT_TESTPAY_SECRET="+tpSecret, "SECKILL_PAYMENT_TESTPAY_ADDR="+tpAddr, "SECKILL_PAYMENT_TESTPAY_URL="+tpURL,
		"SECKILL_PAYMENT_TESTPAY_NOTIFY_URL="+apiURL+"/api/v1/payments/notifications",
		"SECKILL_API_ADDR="+apiAddr, "SECKILL_API_INSTANCE="+testkit.Name(t, "api"), "SECKILL_WORKER_METRICS_ADDR="+workerAddr)
	logs := t.TempDir()
	for _, r := range []struct{ role, health string }{{"testpay", tpURL}, {"worker", "http://" + workerAddr}, {"api", apiURL}} {
		c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{r.role}, Env: env, Log: filepath.Join(logs, r.role+".log"),
			Banner: "testpay test " + r.role}, 20*time.Second)
		testkit.WaitHTTP(t, r.health+"/healthz", c, 90*time.Second)
	}
	api := testkit.Client(t, apiURL)
	buyer := func(u int64) apiclient.RequestEditorFn { return testkit.As(t, []byte(jwtSecret), u, auth.RoleBuyer) }
	buy := func(itemID, user int64) string {
		t.Helper()
		res, err := api.PurchaseWithResponse(ctx, itemID, buyer(user))
		if err := apiclient.Want(res, err, http.StatusAccepted); err != nil {
			t.Fatal(err)
		}
		return res.JSON202.OrderID
	}
	checkout := func(orderID string, user int64) apiclient.Checkout {
		t.Helper()
		res, err := api.CheckoutOrderWithResponse(ctx, orderID, buyer(user))
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(res.JSON200.CheckoutURL, tpURL+"/pay/") {
			t.Fatalf("checkout %+v: want a page of the test provider at %s", res.JSON200, tpURL)
		}
		return *res.JSON200
	}
	wait := func(what string, within time.Duration, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(within); !ok(); time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s", what, within)
			}
		}
	}
	status := func(orderID string, want order.Status) func() bool {
		return func() bool { o, err := s.Store.FindOrder(ctx, orderID); return err == nil && o.Status == want }
	}
	long := s.Sale(ctx, t, "testpay long", 10, 10*time.Minute)

	// (a) The page's button; the notification pays the order.
	a := buy(long.ID, 1)
	co := checkout(a, 1)
	payOnPage(t, co.CheckoutURL)
	wait("order (a) PAID by the notification", time.Minute, status(a, order.StatusPaid))

	// (c) The buyer's pay: the test card, answered after the door's decision.
	// Its notification held back a second (the knob, over the provider's
	// API), so it usually lands after the door's decision: already_paid. Should
	// it land first it pays, and the card's decision is already_paid: either
	// way one payment, PAID once, nothing refunded.
	tp := testpay.NewClient(tpURL, tpSecret, nil)
	if err := tp.SetKnobs(ctx, testpay.Knobs{Delay: time.Second}); err != nil {
		t.Fatal(err)
	}
	c := buy(long.ID, 2)
	res, err := api.PayOrderWithResponse(ctx, c, buyer(2))
	if err := apiclient.Want(res, err, http.StatusOK); err != nil || res.JSON200.Status != apiclient.OrderStatusPAID {
		t.Fatalf("pay: %v %s, want 200 PAID", err, res.Body)
	}
	p, err := s.Store.OrderPayment(ctx, c, "testpay")
	if err != nil || p.Status != store.PaymentSucceeded || p.SucceededAt == nil {
		t.Fatalf("payments row of (c): %+v %v, want succeeded", p, err)
	}
	wait("the notifications of (a) and (c) judged", time.Minute, func() bool {
		n := notifications(apiURL)
		return n["paid"]+n["already_paid"] == 2
	})
	if n := notifications(apiURL); n["already_paid"] != 1 {
		t.Logf("(c)'s notification landed before the card's decision: %v", n)
	}
	var events []string
	if err := s.Store.DB().Raw("SELECT event_id FROM payment_events WHERE payment_id = ? ORDER BY event_id", p.ProviderPaymentID).Scan(&events).Error; err != nil ||
		len(events) != 2 || events[0] != "card:testpay:"+p.ProviderPaymentID || !strings.HasPrefix(events[1], "evt_") {
		t.Fatalf("events of (c)'s payment %v %v: want the card's and the notification's", events, err)
	}
	wait("order (c) PAID", time.Minute, status(c, order.StatusPaid))
	if rs, err := s.Store.OrderRefunds(ctx, c); err != nil || len(rs) != 0 {
		t.Fatalf("refunds of (c): %+v %v, want none", rs, err)
	}

	// (b) Checked out, never paid: the worker's saga cancels it at the provider at pay_by.
	short := s.Sale(ctx, t, "testpay short", 1, 5*time.Second)
	b := buy(short.ID, 3)
	cb := checkout(b, 3)
	wait("order (b) CANCELLED at pay_by", time.Minute, status(b, order.StatusCancelled))
	var n int64
	if err := s.Store.DB().Raw("SELECT COUNT(*) FROM payment_events WHERE event_id = ?", "saga-cancel:testpay:"+cb.PaymentID).Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("the saga's cancel of (b) recorded %d times, %v: want once", n, err)
	}
	if p, err := s.Store.OrderPayment(ctx, b, "testpay"); err != nil || p.Status != store.PaymentCanceled {
		t.Fatalf("payments row of (b): %+v %v, want canceled", p, err)
	}
	if pp, err := tp.Lookup(ctx, cb.PaymentID); err != nil || pp.Status != provider.Canceled {
		t.Fatalf("(b) at the provider: %+v %v, want canceled", pp, err)
	}
	wait("(b)'s unit back in Redis", 30*time.Second, func() bool { left, err := s.Stock.Left(ctx, short.ID); return err == nil && left == 1 })
}

var formAction = regexp.MustCompile(`<form method="post" action="([^"]+)"`)

// payOnPage pays as a browser does: the page, then its form's button; the
// provider sends the buyer back to the shop (303).
func payOnPage(t *testing.T, page string) {
	t.Helper()
	res, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	m := formAction.FindSubmatch(body)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("checkout page: %d %.300s", res.StatusCode, body)
	}
	u, _ := url.Parse(page)
	u, _ = u.Parse(string(m[1]))
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err = noFollow.PostForm(u.String(), url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the pay button: %s", res.Status)
	}
}

var notified = regexp.MustCompile(`(?m)^seckill_payment_notifications_total\{outcome="(\w+)"\} (\d+)$`)

// notifications are the API's notification counts by outcome.
func notifications(apiURL string) map[string]int {
	n := map[string]int{}
	res, err := http.Get(apiURL + "/metrics")
	if err != nil {
		return n
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	for _, m := range notified.FindAllStringSubmatch(string(b), -1) {
		n[m[1]], _ = strconv.Atoi(m[2])
	}
	return n
}
