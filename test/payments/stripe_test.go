package payments_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider/standin"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

const (
	stripeKey    = "sk_test_payments_test"
	stripeSecret = "whsec_payments_stripe_test"
)

// Under SECKILL_PAYMENT_PROVIDER=stripe, the shop's production Stripe code
// (stripepay, stripe-go) against the Stripe stand-in (cmd/seckill-stripe),
// with `seckill api` and `seckill worker`, three processes on the real
// services reaching each other over HTTP only:
//
//	(a) a checkout answers the Checkout Session's page; the session paid
//	    (the stand-in's JSON pay route, its page's button) makes the order
//	    PAID through its webhook (checkout.session.completed: the one event
//	    of a payment the stand-in sends by default, as a shop registers);
//	(b) a session nobody pays is expired by the saga's close at pay_by
//	    (the stand-in records the expire) and the order CANCELLED, its unit
//	    back;
//	(c) support refunds (a)'s order: the refund goes through the stand-in
//	    once, the order REFUNDED.
func TestStripeCheckoutAgainstTheStandin(t *testing.T) {
	testkit.Integration(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	s.Temporal(ctx, t, testkit.Logger(t))
	bin, standinBin := testkit.SeckillBinary(t), testkit.StripeStandinBinary(t)
	sAddr, apiAddr, workerAddr := testkit.FreeAddr(t), testkit.FreeAddr(t), testkit.FreeAddr(t)
	sURL, apiURL := "http://"+sAddr, "http://"+apiAddr
	logs := t.TempDir()
	c := testkit.Start(t, proc.Spec{Path: standinBin, Args: []string{"-addr", sAddr, "-url", sURL, "-keys", stripeKey,
		"-webhook-url", apiURL + "/api/v1/payments/notifications", "-webhook-secret", stripeSecret, "-rps", "25", "-resend-after", "200ms"},
		Log: filepath.Join(logs, "seckill-stripe.log"), Banner: "stripe test seckill-stripe"}, 10*time.Second)
	testkit.WaitHTTP(t, sURL+"/healthz", c, 30*time.Second)
	// A Stripe URL other than Stripe's only on a development machine (SECKILL_DEV).
	env := s.Env("SECKILL_DEV=1", "SECKILL_JWT_SECRET="+jwtSecret, "SECKILL_PAYMENT_PROVIDER=stripe",
		"SECKILL_PAYMENT_STRIPE_URL="+sURL, "SECKILL_PAYMENT_STRIPE_KEY="+stripeKey, "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET="+stripeSecret,
		"SECKILL_PAYMENT_PROVIDER_RPS=20", "SECKILL_PAYMENT_RETURN_URL="+apiURL+"/#/orders/{order_id}",
		"SECKILL_API_ADDR="+apiAddr, "SECKILL_API_INSTANCE="+testkit.Name(t, "api"), "SECKILL_WORKER_METRICS_ADDR="+workerAddr)
	for _, r := range []struct{ role, health string }{{"worker", "http://" + workerAddr}, {"api", apiURL}} {
		c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{r.role}, Env: env, Log: filepath.Join(logs, r.role+".log"),
			Banner: "stripe test " + r.role}, 20*time.Second)
		testkit.WaitHTTP(t, r.health+"/healthz", c, 90*time.Second)
	}
	api := testkit.Client(t, apiURL)
	admin := standin.NewAdmin(sURL, stripeKey, nil)
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
		co := *res.JSON200
		if !strings.HasPrefix(co.PaymentID, "cs_test_") || co.CheckoutURL != sURL+"/pay/"+co.PaymentID {
			t.Fatalf("checkout %+v: want a Checkout Session's page at the stand-in %s", co, sURL)
		}
		return co
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
	// Under Stripe only a verified notification pays: the buyer's pay is refused.
	long := s.Sale(ctx, t, "stripe long", 10, 10*time.Minute)
	a := buy(long.ID, 1)
	if res, err := api.PayOrderWithResponse(ctx, a, buyer(1)); err != nil || res.StatusCode() != http.StatusConflict {
		t.Fatalf("the buyer's pay under stripe: %v %s, want 409", err, res.Body)
	}

	// (a) The session's page, paid; the webhooks pay the order.
	co := checkout(a, 1)
	if again := checkout(a, 1); again.PaymentID != co.PaymentID {
		t.Fatalf("a second checkout opened %s, want %s", again.PaymentID, co.PaymentID)
	}
	if p, err := s.Store.OrderPayment(ctx, a, "stripe"); err != nil || p.ProviderPaymentID != co.PaymentID || p.CheckoutURL != co.CheckoutURL {
		t.Fatalf("payments row of (a): %+v %v, want the session", p, err)
	}
	paid, err := admin.Pay(ctx, co.PaymentID)
	if err != nil || paid.Status != "complete" || paid.PaymentIntent.ID == "" {
		t.Fatalf("pay on the stand-in: %+v %v", paid, err)
	}
	wait("order (a) PAID by the notification", time.Minute, status(a, order.StatusPaid))
	wait("the notification of (a) judged", time.Minute, func() bool { return notifications(apiURL)["paid"] == 1 })
	if n := notifications(apiURL); n["already_paid"] != 0 {
		t.Fatalf("notifications %v: a payment decided twice", n)
	}
	p, err := s.Store.OrderPayment(ctx, a, "stripe")
	if err != nil || p.Status != store.PaymentSucceeded || p.SucceededAt == nil {
		t.Fatalf("payments row of (a): %+v %v, want succeeded", p, err)
	}

	// (b) Checked out, never paid: the saga's close expires the session at pay_by.
	short := s.Sale(ctx, t, "stripe short", 1, 5*time.Second)
	b := buy(short.ID, 3)
	cb := checkout(b, 3)
	wait("order (b) CANCELLED at pay_by", time.Minute, status(b, order.StatusCancelled))
	calls, err := admin.Calls(ctx, "/v1/checkout/sessions/"+cb.PaymentID+"/expire")
	if err != nil || len(calls) == 0 || calls[0].Status != http.StatusOK {
		t.Fatalf("the stand-in's expire calls for (b): %+v %v, want the saga's", calls, err)
	}
	var n int64
	if err := s.Store.DB().Raw("SELECT COUNT(*) FROM payment_events WHERE event_id = ?", "saga-cancel:stripe:"+cb.PaymentID).Scan(&n).Error; err != nil || n != 1 {
		t.Fatalf("the saga's cancel of (b) recorded %d times, %v: want once", n, err)
	}
	if p, err := s.Store.OrderPayment(ctx, b, "stripe"); err != nil || p.Status != store.PaymentCanceled {
		t.Fatalf("payments row of (b): %+v %v, want canceled", p, err)
	}
	if _, err := admin.Pay(ctx, cb.PaymentID); err == nil {
		t.Fatal("(b)'s expired session took the test card")
	}
	wait("(b)'s unit back in Redis", 30*time.Second, func() bool { left, err := s.Stock.Left(ctx, short.ID); return err == nil && left == 1 })

	// (c) Support refunds (a): once through the stand-in, the order REFUNDED.
	staff := testkit.As(t, []byte(jwtSecret), 9, auth.RoleAdmin)
	for range 2 {
		res, err := api.RefundOrderWithResponse(ctx, a, &apiclient.RefundOrderParams{}, apiclient.RefundOrderJSONRequestBody{Reason: "the buyer asked"}, staff)
		if err != nil || res.StatusCode() != http.StatusAccepted && res.StatusCode() != http.StatusOK {
			t.Fatalf("support refund: %v %s", err, res.Body)
		}
	}
	wait("order (a) REFUNDED", time.Minute, status(a, order.StatusRefunded))
	rs, err := s.Store.OrderRefunds(ctx, a)
	if err != nil || len(rs) != 1 || rs[0].Status != store.RefundSucceeded || !strings.HasPrefix(rs[0].ProviderRefundID, "re_test_") {
		t.Fatalf("refunds of (a): %+v %v, want one succeeded at the stand-in", rs, err)
	}
	refunds, err := admin.Calls(ctx, "/v1/refunds")
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, c := range refunds {
		if c.Method == http.MethodPost && c.Status == http.StatusOK {
			made++
		}
	}
	if made != 1 {
		t.Fatalf("refunds made at the stand-in: %d (%+v), want 1", made, refunds)
	}
}
