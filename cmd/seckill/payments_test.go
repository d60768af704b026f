package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// `seckill api` with SECKILL_PAYMENT_PROVIDER=testpay and `seckill
// testpay`, against the real services: a buyer's checkout answers the test
// provider's page; paying there sends the signed notification to the API,
// which pays the order in MySQL.
func TestAPIPaysThroughTheTestProvider(t *testing.T) {
	st, mcfg := testkit.MySQL(t)
	_, prefix := testkit.Redis(t)
	cfg := testkit.Config(t)
	cfg.Dev, cfg.MySQL, cfg.Redis.KeyPrefix = true, mcfg, prefix
	cfg.API.Addr, cfg.API.MetricsAddr = freeAddr(t), freeAddr(t)
	cfg.API.Instance = testkit.Name(t, "api")
	tp := &cfg.Payment.Testpay
	cfg.Payment.Provider, tp.Addr = "testpay", freeAddr(t)
	tp.URL, tp.NotifyURL = "http://"+tp.Addr, "http://"+cfg.API.Addr+"/api/v1/payments/notifications"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 2)
	go func() { done <- runAPI(ctx, &app{cfg: cfg, log: testkit.Logger(t)}) }()
	go func() { done <- runTestpay(ctx, &app{cfg: cfg, log: testkit.Logger(t)}) }()
	t.Cleanup(func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("api or testpay: %v", err)
			}
		}
	})
	it, err := st.CreateItem(ctx, store.Item{Name: "x", PriceCents: 999, StockTotal: 1,
		StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	id, payBy := order.NewID(), time.Now().Add(time.Minute)
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: 5, ItemID: it.ID, PayBy: &payBy}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeductStock(ctx, id, it.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	token, err := auth.Sign([]byte(cfg.JWTSecret.Value()), 5, auth.RoleBuyer, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var res *http.Response
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+cfg.API.Addr+"/api/v1/orders/"+id+"/checkout", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		if res, err = http.DefaultClient.Do(req); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("api not listening: %v", err)
		}
	}
	var co struct {
		CheckoutURL string `json:"checkout_url"`
	}
	err = json.NewDecoder(res.Body).Decode(&co)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || err != nil || !strings.HasPrefix(co.CheckoutURL, tp.URL+"/pay/") {
		t.Fatalf("checkout: %d %+v %v", res.StatusCode, co, err)
	}
	page, err := http.Get(co.CheckoutURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	_ = page.Body.Close()
	if !strings.Contains(string(body), "Pay 9.99 EUR") {
		t.Fatalf("checkout page: %d %.300s", page.StatusCode, body)
	}
	// The page's button, without following the redirect to the storefront.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	paid, err := noFollow.PostForm(co.CheckoutURL, url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	_ = paid.Body.Close()
	if paid.StatusCode != http.StatusSeeOther || !strings.Contains(paid.Header.Get("Location"), id) {
		t.Fatalf("pay button: %d to %q", paid.StatusCode, paid.Header.Get("Location"))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if o, err := st.FindOrder(ctx, id); err == nil && o.Status == order.StatusPaid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the notification did not pay the order within 10 s")
		}
	}
}

// The worker's provider: none under the door, the test provider's client or
// Stripe behind the guard; the sagas started carry the payment steps
// whenever a provider is configured. The guard's rate: the setting, else
// the provider's default.
func TestWorkerProvider(t *testing.T) {
	cfg := testkit.Config(t)
	d := &deps{cfg: cfg, log: testkit.Logger(t)}
	for _, c := range []struct {
		name      string
		provider  bool
		withSteps bool
	}{{"door", false, false}, {"", false, false}, {"testpay", true, true}, {"stripe", true, true}} {
		if p := newProvider(d, c.name); (p != nil) != c.provider {
			t.Errorf("%q: provider %v", c.name, p)
		}
		cfg.Payment.Provider = c.name
		if viaProvider(cfg) != c.withSteps {
			t.Errorf("%q: viaProvider %v", c.name, !c.withSteps)
		}
	}
	for _, c := range []struct {
		name string
		rps  int
		want float64
	}{{"stripe", 0, 0}, {"testpay", 0, 1000}, {"testpay", 50, 50}, {"stripe", 90, 90}} {
		cfg.Payment.Provider, cfg.Payment.RPS = c.name, c.rps
		if got := cfg.Payment.GuardRPS(); got != c.want {
			t.Errorf("%s at %d: %v, want %v", c.name, c.rps, got, c.want)
		}
	}
}
