package payhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
)

// buyerHeader names the test's buyer; no header is no token.
const buyerHeader = "X-Test-Buyer"

// engine serves the package's routes over o, failing as the API does.
func engine(o payhook.Options) *gin.Engine {
	gin.SetMode(gin.TestMode)
	e := gin.New()
	payhook.Register(e, payhook.Deps{Options: o, Log: slog.New(slog.DiscardHandler), Now: time.Now,
		Auth: func(c *gin.Context, role auth.Role) (auth.Principal, error) {
			var id int64
			if _, err := fmt.Sscan(c.GetHeader(buyerHeader), &id); err != nil {
				return auth.Principal{}, apierr.ErrUnauthorized
			}
			return auth.Principal{UserID: id, Role: auth.RoleBuyer}, nil
		},
		Fail: func(c *gin.Context, err error) { apierr.Write(c, apierr.To(err)) },
	})
	return e
}

func do(t *testing.T, h http.Handler, method, path string, body []byte, header map[string]string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	var out map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &out)
	return w.Code, out
}

type fakeCashier struct {
	notified []string
	err      error
}

func (f *fakeCashier) Checkout(_ context.Context, id string, user int64, _ time.Time) (cashier.Checkout, error) {
	if user != 7 {
		return cashier.Checkout{}, order.ErrNotFound
	}
	return cashier.Checkout{OrderID: id, PaymentID: "pi_1", CheckoutURL: "http://pay/pi_1"}, nil
}

// Verify refuses a payload that says "forged" (its signature, in the fake).
func (f *fakeCashier) Verify(payload []byte, _ string) (provider.Event, string, error) {
	if bytes.Contains(payload, []byte("forged")) {
		return provider.Event{}, cashier.OutcomeBadSignature, fmt.Errorf("notification: %w", provider.ErrBadSignature)
	}
	return provider.Event{ID: string(payload)}, "", nil
}

func (f *fakeCashier) Judge(_ context.Context, ev provider.Event) (string, error) {
	f.notified = append(f.notified, ev.ID)
	return "paid", f.err
}

func TestRoutesWithoutAProviderAnswer404(t *testing.T) {
	e := engine(payhook.Options{NotifyRPS: 10})
	id := order.NewID()
	if code, _ := do(t, e, "POST", "/api/v1/orders/"+id+"/checkout", nil, map[string]string{buyerHeader: "7"}); code != http.StatusNotFound {
		t.Fatalf("checkout without a provider: %d", code)
	}
	if code, _ := do(t, e, "POST", payhook.NotificationRoute, []byte("{}"), nil); code != http.StatusNotFound {
		t.Fatalf("notification without a provider: %d", code)
	}
}

func TestCheckout(t *testing.T) {
	e := engine(payhook.Options{Cashier: &fakeCashier{}, NotifyRPS: 10})
	id := order.NewID()
	code, out := do(t, e, "POST", "/api/v1/orders/"+id+"/checkout", nil, map[string]string{buyerHeader: "7"})
	if code != http.StatusOK || out["checkout_url"] != "http://pay/pi_1" || out["order_id"] != id {
		t.Fatalf("checkout: %d %v", code, out)
	}
	for name, c := range map[string]struct {
		path, buyer string
		want        int
	}{
		"no token":      {"/api/v1/orders/" + id + "/checkout", "", http.StatusUnauthorized},
		"another buyer": {"/api/v1/orders/" + id + "/checkout", "8", http.StatusNotFound},
		"bad id":        {"/api/v1/orders/nope/checkout", "7", http.StatusNotFound},
	} {
		h := map[string]string{}
		if c.buyer != "" {
			h[buyerHeader] = c.buyer
		}
		if code, _ := do(t, e, "POST", c.path, nil, h); code != c.want {
			t.Errorf("%s: %d, want %d", name, code, c.want)
		}
	}
}

// A notification is capped at 64 KiB, rate limited on its own, and a
// refused one is 400 BAD_NOTIFICATION.
func TestNotificationLimits(t *testing.T) {
	f := &fakeCashier{}
	e := engine(payhook.Options{Cashier: f, NotifyRPS: 3})
	if code, out := do(t, e, "POST", payhook.NotificationRoute, []byte(`{"id":"evt"}`), nil); code != http.StatusOK || out["outcome"] != "paid" {
		t.Fatalf("notification: %d %v", code, out)
	}
	big := []byte(`{"pad":"` + strings.Repeat("x", payhook.MaxNotification) + `"}`)
	if code, out := do(t, e, "POST", payhook.NotificationRoute, big, nil); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a body above the cap: %d %v", code, out)
	}
	if code, out := do(t, e, "POST", payhook.NotificationRoute, []byte(`{"forged":1}`), nil); code != http.StatusBadRequest ||
		out["error"].(map[string]any)["code"] != "BAD_NOTIFICATION" {
		t.Fatalf("bad signature: %d %v", code, out)
	}
	for i := range 2 { // the verified ones' rate: 3 a second, one taken above
		if code, _ := do(t, e, "POST", payhook.NotificationRoute, []byte(fmt.Sprintf(`{"id":"evt_%d"}`, i)), nil); code != http.StatusOK {
			t.Fatalf("verified notification %d: %d", i, code)
		}
	}
	if code, _ := do(t, e, "POST", payhook.NotificationRoute, []byte(`{"id":"evt_more"}`), nil); code != http.StatusTooManyRequests {
		t.Fatalf("past the notifications' rate: %d", code)
	}
	if len(f.notified) != 3 { // not the capped one, the forged one nor the limited one
		t.Fatalf("notified %d", len(f.notified))
	}
}

// A source that sends forged notifications is shed on its own (a few more
// tries, then 429 before its body is read); the genuine provider, from
// another address, keeps its whole rate meanwhile.
func TestForgerIsShedNotTheProvider(t *testing.T) {
	f := &fakeCashier{}
	e := engine(payhook.Options{Cashier: f, NotifyRPS: 50})
	from := func(ip string, body string) int {
		req := httptest.NewRequest("POST", payhook.NotificationRoute, strings.NewReader(body))
		req.RemoteAddr = ip + ":4242"
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		return w.Code
	}
	codes := map[int]int{}
	for range 100 {
		codes[from("203.0.113.9", `{"forged":1}`)]++
	}
	if codes[http.StatusBadRequest] != payhook.BadSourceBurst || codes[http.StatusTooManyRequests] != 100-payhook.BadSourceBurst {
		t.Fatalf("forger's answers %v, want %d refusals then 429s", codes, payhook.BadSourceBurst)
	}
	for i := range 40 {
		if code := from("198.51.100.7", fmt.Sprintf(`{"id":"evt_%d"}`, i)); code != http.StatusOK {
			t.Fatalf("the provider's notification %d during the flood: %d", i, code)
		}
	}
	if len(f.notified) != 40 {
		t.Fatalf("decided %d, want the provider's 40", len(f.notified))
	}
}
