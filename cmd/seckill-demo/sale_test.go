package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/testkit"
)

// The demo sale against a real `seckill api` and `seckill worker`: the item
// is created, three buyers hold a unit each, 1003's order is PAID and
// 1001's, the one left to pay, PENDING_PAYMENT; the words say so. At the
// door (1003 pays with POST …/pay); through the test provider, `seckill
// testpay`; and as make run runs it, through Stripe Checkout's code path
// against the Stripe stand-in, `seckill-stripe` (1003 pays on the
// provider's checkout page; 1001's page is printed).
func TestDemoSale(t *testing.T) {
	testkit.Integration(t)
	for _, provider := range []string{"door", "testpay", "stripe"} {
		t.Run(provider, func(t *testing.T) { demoSale(t, provider) })
	}
}

const demoStripeSecret = "whsec_demo_test"

func demoSale(t *testing.T, provider string) {
	bin := testkit.SeckillBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	s.Temporal(ctx, t, testkit.Logger(t))
	addr := testkit.FreeAddr(t)
	tpAddr := testkit.FreeAddr(t)
	env := s.Env("SECKILL_DEV=1", "SECKILL_API_ADDR="+addr, "SECKILL_WORKER_METRICS_ADDR="+testkit.FreeAddr(t),
		"SECKILL_PAYMENT_PROVIDER="+provider, "SECKILL_PAYMENT_TESTPAY_ADDR="+tpAddr, "SECKILL_PAYMENT_TESTPAY_URL=http://"+tpAddr,
		"SECKILL_PAYMENT_TESTPAY_NOTIFY_URL=http://"+addr+"/api/v1/payments/notifications")
	logs := t.TempDir()
	roles := []string{"worker", "api"}
	switch provider {
	case "testpay":
		roles = append(roles, "testpay")
	case "stripe": // the Stripe stand-in on tpAddr, as make run starts it
		env = append(env, "SECKILL_PAYMENT_STRIPE_URL=http://"+tpAddr, "SECKILL_PAYMENT_STRIPE_KEY=sk_test_demo",
			"SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET="+demoStripeSecret)
		c := testkit.Start(t, proc.Spec{Path: testkit.StripeStandinBinary(t), Args: []string{"-addr", tpAddr,
			"-webhook-url", "http://" + addr + "/api/v1/payments/notifications", "-webhook-secret", demoStripeSecret},
			Log: filepath.Join(logs, "seckill-stripe.log"), Banner: "demo test seckill-stripe"}, 10*time.Second)
		testkit.WaitHTTP(t, "http://"+tpAddr+"/healthz", c, 30*time.Second)
	}
	for _, role := range roles {
		testkit.Start(t, proc.Spec{Path: bin, Args: []string{role}, Env: env, Log: filepath.Join(logs, role+".log"), Banner: "demo test " + role}, 20*time.Second)
	}
	api := "http://" + addr
	testkit.WaitHTTP(t, api+"/readyz", nil, 90*time.Second)

	// run signs with SECKILL_JWT_SECRET, as the slice's API checks.
	var out, said bytes.Buffer
	err := run(ctx, options{API: api, Within: time.Minute}, &out, &said)
	t.Logf("the demo said:\n%s", said.String())
	if err != nil {
		t.Fatal(err)
	}
	var d demo
	if _, err := fmt.Sscanf(out.String(), "ITEM_ID=%d\nORDER_ID=%s\n", &d.ItemID, &d.ToPay); err != nil {
		t.Fatalf("stdout %q: %v; want ITEM_ID=… and ORDER_ID=… for scripts/run", out.String(), err)
	}
	toPay, err := s.Store.FindOrder(ctx, d.ToPay)
	if err != nil || toPay.ItemID != d.ItemID || toPay.UserID != leftFor || toPay.Status != order.StatusPendingPayment {
		t.Fatalf("the order left to pay: %+v, %v; want buyer %d's, PENDING_PAYMENT, of item %d", toPay, err, leftFor, d.ItemID)
	}
	counts, err := s.Store.CountOrders(ctx, []int64{d.ItemID})
	if err != nil || counts[d.ItemID][order.StatusPaid] != 1 || counts[d.ItemID][order.StatusPendingPayment] != 2 {
		t.Fatalf("orders by status %v, %v; want 1 PAID, 2 PENDING_PAYMENT", counts[d.ItemID], err)
	}
	words := []string{`put item`, `"Demo phone", 100 units at 999.00`, "buyer 1001 bought one unit", "buyer 1004 bought one unit",
		"buyer 1003 paid order", "of buyer 1003 is PAID", "of buyer 1001 is PENDING_PAYMENT"}
	if provider != "door" {
		page := "http://" + tpAddr + "/pay/"
		if !strings.Contains(out.String(), "\nCHECKOUT_URL="+page) {
			t.Errorf("stdout %q: want CHECKOUT_URL=%s… for scripts/run", out.String(), page)
		}
		words = append(words, "buyer 1003 checked out order", "the provider's checkout page is "+page, "on that page with the test card",
			"buyer 1001's order "+d.ToPay+" is payable on "+page)
		var succeeded int64
		if err := s.Store.DB().Raw("SELECT COUNT(*) FROM payments WHERE status = 'succeeded'").Scan(&succeeded).Error; err != nil || succeeded != 1 {
			t.Errorf("%d succeeded payments, %v; want 1 (1003's)", succeeded, err)
		}
	}
	for _, want := range words {
		if !strings.Contains(said.String(), want) {
			t.Errorf("the demo's words do not say %q", want)
		}
	}
}
