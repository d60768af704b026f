package api_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/controlroom"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

func sign(t *testing.T, method jwt.SigningMethod, key any, c jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestAuthRejectsEveryBadToken(t *testing.T) {
	h := newHarness(t)
	item := h.activeItem(10)
	exp := time.Now().Add(time.Hour).Unix()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	good := jwt.MapClaims{"sub": "7", "role": "buyer", "exp": exp}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for kk, vv := range good {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	cases := map[string]string{
		"no token":         "",
		"bad signature":    sign(t, jwt.SigningMethodHS256, []byte("other-secret"), good),
		"alg none":         sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good),
		"RS256":            sign(t, jwt.SigningMethodRS256, rsaKey, good),
		"HS512":            sign(t, jwt.SigningMethodHS512, testSecret, good),
		"expired":          sign(t, jwt.SigningMethodHS256, testSecret, with("exp", time.Now().Add(-time.Minute).Unix())),
		"no exp":           sign(t, jwt.SigningMethodHS256, testSecret, with("exp", nil)),
		"malformed":        "not.a.jwt",
		"garbage":          "%%%%",
		"non-numeric sub":  sign(t, jwt.SigningMethodHS256, testSecret, with("sub", "alice")),
		"negative sub":     sign(t, jwt.SigningMethodHS256, testSecret, with("sub", "-5")),
		"zero sub":         sign(t, jwt.SigningMethodHS256, testSecret, with("sub", "0")),
		"padded sub":       sign(t, jwt.SigningMethodHS256, testSecret, with("sub", "+7")),
		"overflow sub":     sign(t, jwt.SigningMethodHS256, testSecret, with("sub", "99999999999999999999")),
		"no sub":           sign(t, jwt.SigningMethodHS256, testSecret, with("sub", nil)),
		"unknown role":     sign(t, jwt.SigningMethodHS256, testSecret, with("role", "root")),
		"no role":          sign(t, jwt.SigningMethodHS256, testSecret, with("role", nil)),
		"truncated":        h.buyer(7)[:40],
		"signature bitrot": flipLast(h.buyer(7)),
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), tok, nil)
			expect(t, r, http.StatusUnauthorized, "UNAUTHORIZED")
		})
	}
	// Not a bearer scheme.
	req, _ := http.NewRequest("POST", h.ts.URL+fmt.Sprintf("/api/v1/seckill/%d", item), nil)
	req.Header.Set("Authorization", "Basic "+h.buyer(7))
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("basic scheme: status %d", res.StatusCode)
	}
	// And the good token works.
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), sign(t, jwt.SigningMethodHS256, testSecret, good), nil),
		http.StatusAccepted, "")
}

func flipLast(tok string) string {
	b := []byte(tok)
	if b[len(b)-2] == 'A' {
		b[len(b)-2] = 'B'
	} else {
		b[len(b)-2] = 'A'
	}
	return string(b)
}

func TestRolesAreEnforced(t *testing.T) {
	h := newHarness(t)
	item := h.activeItem(10)
	buyer := h.buyer(5)
	expect(t, h.do("POST", "/api/v1/items", buyer, map[string]any{"name": "x"}), http.StatusForbidden, "FORBIDDEN")
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", item), buyer, nil), http.StatusForbidden, "FORBIDDEN")
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.admin, nil), http.StatusForbidden, "FORBIDDEN")
	expect(t, h.do("POST", "/api/v1/items", "", map[string]any{"name": "x"}), http.StatusUnauthorized, "UNAUTHORIZED")
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", item), "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
}

func TestCreateItemValidationNamesEachField(t *testing.T) {
	h := newHarness(t)
	start, end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339), time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339)
	valid := func() map[string]any {
		return map[string]any{"name": "phone", "price_cents": 199900, "stock_total": 100, "start_at": start, "end_at": end}
	}
	with := func(k string, v any) map[string]any {
		m := valid()
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	cases := []struct {
		name   string
		body   any
		fields []string
	}{
		{"missing name", with("name", nil), []string{"name"}},
		{"empty name", with("name", ""), []string{"name"}},
		{"long name", with("name", strings.Repeat("é", 201)), []string{"name"}},
		{"name not a string", with("name", 5), []string{"name"}},
		{"negative price", with("price_cents", -1), []string{"price_cents"}},
		{"fractional price", with("price_cents", 1.5), []string{"price_cents"}},
		{"price as text", with("price_cents", "ten"), []string{"price_cents"}},
		{"missing stock", with("stock_total", nil), []string{"stock_total"}},
		{"zero stock", with("stock_total", 0), []string{"stock_total"}},
		{"huge stock", with("stock_total", 10_000_001), []string{"stock_total"}},
		{"bad start", with("start_at", "tomorrow"), []string{"start_at"}},
		{"missing end", with("end_at", nil), []string{"end_at"}},
		{"end before start", with("end_at", start), []string{"end_at"}},
		{"payment timeout low", with("payment_timeout_seconds", 4), []string{"payment_timeout_seconds"}},
		{"payment timeout high", with("payment_timeout_seconds", 86_401), []string{"payment_timeout_seconds"}},
		{"everything wrong", map[string]any{"name": "", "price_cents": -5, "stock_total": 0, "start_at": "x", "end_at": "y",
			"payment_timeout_seconds": 1}, []string{"name", "price_cents", "stock_total", "start_at", "end_at", "payment_timeout_seconds"}},
		{"not an object", "[1,2]", nil},
		{"not JSON", "{", nil},
		{"empty body", "", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do("POST", "/api/v1/items", h.admin, tc.body)
			expect(t, r, http.StatusBadRequest, "BAD_REQUEST")
			msg := r.json(t)["error"].(map[string]any)["message"].(string)
			for _, f := range tc.fields {
				if !strings.Contains(msg, f+":") {
					t.Fatalf("message %q does not name %s", msg, f)
				}
			}
		})
	}

	// A valid create: 201 with the item, stock loaded in Redis; "stock" is an alias.
	it := createdItem(t, h.do("POST", "/api/v1/items", h.admin, map[string]any{"name": "phone", "price_cents": 0, "stock": 3,
		"start_at": start, "end_at": end, "payment_timeout_seconds": 60}))
	if it.ID <= 0 || it.Name != "phone" || it.StockTotal != 3 || it.StockLeft != 3 || it.Status != "UPCOMING" ||
		it.PaymentTimeoutSeconds != 60 || it.StartAt.Format(time.RFC3339) != start {
		t.Fatalf("created item %+v", it)
	}
	if left, err := h.stk.Left(context.Background(), it.ID); err != nil || left != 3 {
		t.Fatalf("redis stock %d %v", left, err)
	}
	// Default payment timeout.
	if got := createdItem(t, h.do("POST", "/api/v1/items", h.admin, valid())).PaymentTimeoutSeconds; got != 900 {
		t.Fatalf("default payment timeout %v", got)
	}
}

func TestGetItemAndWarmup(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	id := h.activeItem(2)
	r := h.do("GET", fmt.Sprintf("/api/v1/items/%d", id), "", nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "ACTIVE" || r.json(t)["stock_left"].(float64) != 2 {
		t.Fatalf("item %s", r.body)
	}
	expect(t, h.do("GET", "/api/v1/items/999999", "", nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	expect(t, h.do("GET", "/api/v1/items/abc", "", nil), http.StatusBadRequest, "BAD_REQUEST")
	expect(t, h.do("GET", "/api/v1/items/-1", "", nil), http.StatusBadRequest, "BAD_REQUEST")
	expect(t, h.do("GET", "/api/v1/items/0", "", nil), http.StatusBadRequest, "BAD_REQUEST")
	expect(t, h.do("GET", "/api/v1/items/99999999999999999999", "", nil), http.StatusBadRequest, "BAD_REQUEST")

	// Sell one unit, then warm up: live stock is not overwritten.
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", id), h.buyer(9), nil), http.StatusAccepted, "")
	r = h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", id), h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["stock_left"].(float64) != 1 {
		t.Fatalf("warmup overwrote live stock: %s", r.body)
	}
	expect(t, h.do("POST", "/api/v1/items/424242/warmup", h.admin, nil), http.StatusNotFound, "ITEM_NOT_FOUND")

	// Warmup loads an item whose stock is missing from Redis: the stock row
	// less the live reservation (the unit sold stays sold).
	if err := h.rdb.Del(ctx, h.stk.ItemKeys(id).Stock).Err(); err != nil {
		t.Fatal(err)
	}
	r = h.do("POST", fmt.Sprintf("/api/v1/items/%d/warmup", id), h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if left, _ := h.stk.Left(ctx, id); left != 1 {
		t.Fatalf("warmup did not load: left=%d", left)
	}

	// Statuses.
	up := h.newItem(1, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	if s := h.do("GET", fmt.Sprintf("/api/v1/items/%d", up), "", nil).json(t)["status"]; s != "UPCOMING" {
		t.Fatalf("status %v", s)
	}
	ended := h.newItem(1, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	if s := h.do("GET", fmt.Sprintf("/api/v1/items/%d", ended), "", nil).json(t)["status"]; s != "ENDED" {
		t.Fatalf("status %v", s)
	}
	one := h.activeItem(1)
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", one), h.buyer(9), nil), http.StatusAccepted, "")
	if s := h.do("GET", fmt.Sprintf("/api/v1/items/%d", one), "", nil).json(t)["status"]; s != "SOLD_OUT" {
		t.Fatalf("status %v", s)
	}
}

func TestPurchaseContract(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	item := h.activeItem(2)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)

	h.checkPurchaseRefused(t, path, h.newItem)

	orderID := accepted(t, h.do("POST", path, h.buyer(1), nil))

	r := h.do("POST", path, h.buyer(1), nil)
	expect(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	if got := r.json(t)["error"].(map[string]any)["order_id"]; got != orderID {
		t.Fatalf("ALREADY_PURCHASED order_id %v, want %s", got, orderID)
	}
	expect(t, h.do("POST", path, h.buyer(2), nil), http.StatusAccepted, "")
	expect(t, h.do("POST", path, h.buyer(3), nil), http.StatusGone, "SOLD_OUT")
	expect(t, h.do("POST", path, h.buyer(4), nil), http.StatusGone, "SOLD_OUT") // the local flag
	if left, _ := h.stk.Left(ctx, item); left != 0 {
		t.Fatalf("left %d", left)
	}

	// A compensation gives a unit back: the sold-out flag clears within a
	// couple of seconds. The released buyer still holds the item (one order
	// per buyer, ever, even cancelled); the next buyer gets the unit.
	if ok, err := h.stk.Release(ctx, item, orderID); !ok || err != nil {
		t.Fatalf("release: %v %v", ok, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		r = h.do("POST", path, h.buyer(1), nil)
		if r.status != http.StatusGone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sold-out flag did not clear within 2s of a release")
		}
		time.Sleep(50 * time.Millisecond)
	}
	expect(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	expect(t, h.do("POST", path, h.buyer(5), nil), http.StatusAccepted, "")
	expect(t, h.do("POST", path, h.buyer(6), nil), http.StatusGone, "SOLD_OUT")
}

func TestSoldOutFlagClearsByRefreshWithoutEvent(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	item := h.activeItem(1)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)
	r := h.do("POST", path, h.buyer(1), nil)
	expect(t, r, http.StatusAccepted, "")
	expect(t, h.do("POST", path, h.buyer(2), nil), http.StatusGone, "SOLD_OUT")
	// Put a unit back without publishing the stock event (a lost message).
	k := h.stk.ItemKeys(item)
	h.rdb.HDel(ctx, k.Orders, r.json(t)["order_id"].(string))
	h.rdb.Incr(ctx, k.Stock)
	deadline := time.Now().Add(2 * time.Second)
	for h.do("POST", path, h.buyer(3), nil).status != http.StatusAccepted {
		if time.Now().After(deadline) {
			t.Fatal("sold-out flag did not clear by refresh")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRateLimits(t *testing.T) {
	t.Run("buyer", func(t *testing.T) {
		h := newHarness(t, func(c *config.API, _ *api.Deps) { c.BuyerRPS, c.BuyerBurst = 0.5, 2 })
		item := h.activeItem(100)
		path := fmt.Sprintf("/api/v1/seckill/%d", item)
		expect(t, h.do("POST", path, h.buyer(1), nil), http.StatusAccepted, "")
		expect(t, h.do("POST", path, h.buyer(1), nil), http.StatusConflict, "ALREADY_PURCHASED")
		r := h.do("POST", path, h.buyer(1), nil)
		expect(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 2 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
		// Another buyer is not affected.
		expect(t, h.do("POST", path, h.buyer(2), nil), http.StatusAccepted, "")
	})
	t.Run("global", func(t *testing.T) {
		h := newHarness(t, func(c *config.API, _ *api.Deps) { c.GlobalRPS, c.GlobalBurst = 0.1, 1 })
		item := h.activeItem(100)
		path := fmt.Sprintf("/api/v1/seckill/%d", item)
		expect(t, h.do("POST", path, h.buyer(1), nil), http.StatusAccepted, "")
		r := h.do("POST", path, h.buyer(2), nil)
		expect(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
		if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 10 {
			t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
		}
	})
	// Answers the instance gives from memory (sold out, not started, ended)
	// cost nothing downstream and take no global token; the reservation does.
	t.Run("global guards the reservation only", func(t *testing.T) {
		h := newHarness(t, func(c *config.API, _ *api.Deps) { c.GlobalRPS, c.GlobalBurst = 0.01, 1 })
		sold := h.activeItem(1)
		later := h.newItem(5, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", sold), h.buyer(1), nil), http.StatusAccepted, "")
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", sold), h.buyer(2), nil), http.StatusGone, "SOLD_OUT")
		for u := int64(3); u < 23; u++ {
			expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", sold), h.buyer(u), nil), http.StatusGone, "SOLD_OUT")
			expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", later), h.buyer(u), nil), http.StatusForbidden, "SALE_NOT_STARTED")
		}
		// The global bucket (burst 1) paid for the one reservation above and
		// for nothing else (the unit was the last: the item is flagged sold
		// out in memory): the next reservation attempt finds it empty.
		other := h.activeItem(5)
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", other), h.buyer(30), nil), http.StatusTooManyRequests, "RATE_LIMITED")
	})
	t.Run("ip", func(t *testing.T) {
		h := newHarness(t, func(c *config.API, _ *api.Deps) { c.IPRPS, c.IPBurst = 1, 3 })
		item := h.activeItem(100)
		var last response
		for i := 0; i < 5; i++ {
			last = h.do("GET", fmt.Sprintf("/api/v1/items/%d", item), "", nil)
		}
		expect(t, last, http.StatusTooManyRequests, "RATE_LIMITED")
		if last.header.Get("Retry-After") == "" {
			t.Fatal("no Retry-After")
		}
		// Failed auth counts against the IP too.
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), "bad", nil), http.StatusTooManyRequests, "RATE_LIMITED")
		// An authenticated buyer is limited per buyer, not per IP.
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(1), nil), http.StatusAccepted, "")
	})
}

func TestRedisDownIs503AndReservesNothing(t *testing.T) {
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		// Nothing listens on port 1.
		down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = down.Close() })
		downUnits := stock.New(down, "seckill_t_down")
		d.Units, d.Views = downUnits, orderstatus.New(down, "seckill_t_down")
	})
	// Create the item in MySQL directly (the API cannot load Redis).
	it, err := h.db.CreateItem(context.Background(), store.Item{Name: "x", PriceCents: 1, StockTotal: 5,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", it.ID), h.buyer(1), nil)
	expect(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	if n, _ := h.rdb.Keys(context.Background(), "seckill_t_down*").Result(); len(n) != 0 {
		t.Fatalf("keys written while redis was down: %v", n)
	}
	// Admin create answers 503 too, naming the warmup.
	r = h.do("POST", "/api/v1/items", h.admin, map[string]any{"name": "x", "price_cents": 1, "stock_total": 1,
		"start_at": time.Now().Format(time.RFC3339), "end_at": time.Now().Add(time.Hour).Format(time.RFC3339)})
	expect(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	// Readiness with a failing check names it.
}

func TestRouterErrorsUseTheErrorBody(t *testing.T) {
	h := newHarness(t, func(c *config.API, _ *api.Deps) { c.BodyLimitBytes = 1024 })
	h.srv.Engine().GET("/test/panic", func(*gin.Context) { panic("boom: secret detail") })
	expect(t, h.do("GET", "/no/such/route", "", nil), http.StatusNotFound, "NOT_FOUND")
	expect(t, h.do("DELETE", "/api/v1/items/1", "", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	expect(t, h.do("GET", "/api/v1/seckill/1", "", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	big := `{"name":"` + strings.Repeat("a", 4096) + `"}`
	expect(t, h.do("POST", "/api/v1/items", h.admin, big), http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
	// A chunked body (no Content-Length) is cut by MaxBytesReader.
	req, _ := http.NewRequest("POST", h.ts.URL+"/api/v1/items", &slowReader{s: big})
	req.Header.Set("Authorization", "Bearer "+h.admin)
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversized body: %d", res.StatusCode)
	}
	r := h.do("GET", "/test/panic", "", nil)
	expect(t, r, http.StatusInternalServerError, "INTERNAL")
	if strings.Contains(string(r.body), "boom") || strings.Contains(string(r.body), "goroutine") {
		t.Fatalf("500 body leaks details: %s", r.body)
	}
	expect(t, h.do("GET", "/healthz", "", nil), http.StatusOK, "")
	m := h.do("GET", "/metrics", "", nil)
	expect(t, m, http.StatusOK, "")
	for _, name := range []string{"seckill_http_requests_total", "seckill_http_request_duration_seconds", "seckill_rejections_total"} {
		if !strings.Contains(string(m.body), name) {
			t.Fatalf("metrics lack %s", name)
		}
	}
}

// slowReader hides its length so the client sends a chunked body.
type slowReader struct {
	s string
	i int
}

func (r *slowReader) Read(p []byte) (int, error) {
	if r.i >= len(r.s) {
		return 0, io.EOF
	}
	n := copy(p, r.s[r.i:])
	r.i += n
	return n, nil
}

func TestReadyzNamesWhatIsDown(t *testing.T) {
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{
			"redis":    func(context.Context) error { return nil },
			"rocketmq": api.TCPCheck("127.0.0.1:1"),
			"temporal": func(context.Context) error { return errors.New("not connected") },
		}
	})
	r := h.do("GET", "/readyz", "", nil)
	expect(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	msg := r.json(t)["error"].(map[string]any)["message"].(string)
	if !strings.Contains(msg, "rocketmq") || !strings.Contains(msg, "temporal") || strings.Contains(msg, "redis") {
		t.Fatalf("readyz message %q", msg)
	}
	h2 := newHarness(t, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{"redis": func(context.Context) error { return nil }}
	})
	expect(t, h2.do("GET", "/readyz", "", nil), http.StatusOK, "")
}

func TestGetOrderOwnershipAndFallback(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	item := h.activeItem(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(11), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)

	v := h.checkOrderAccess(t, id, item)

	// The saga's status wins over QUEUED, and MarkQueued never overwrites it.
	v.Status, v.UpdatedAt = order.StatusPendingPayment, time.Now().UTC()
	if err := h.views.PublishStatus(ctx, v); err != nil {
		t.Fatal(err)
	}
	if err := h.views.MarkQueued(ctx, order.View{OrderID: id, Status: order.StatusQueued, UserID: 11}); err != nil {
		t.Fatal(err)
	}
	if s := h.do("GET", "/api/v1/orders/"+id, h.buyer(11), nil).json(t)["status"]; s != "PENDING_PAYMENT" {
		t.Fatalf("status %v", s)
	}

	// Once the Redis status is gone, the database answers.
	dbID := order.NewID()
	now := time.Now().UTC()
	if err := h.db.DB().Create(&store.Order{OrderID: dbID, UserID: 13, ItemID: item, Status: order.StatusPaid,
		CreatedAt: now, UpdatedAt: now}).Error; err != nil {
		t.Fatal(err)
	}
	h.checkPaidRow(t, dbID)
}

// A REFUNDED order read from the database names its provider refund.
func TestGetRefundedOrderNamesItsRefund(t *testing.T) {
	h := newHarness(t)
	item := h.activeItem(5)
	id, now := order.NewID(), time.Now().UTC()
	if err := h.db.DB().Create(&store.Order{OrderID: id, UserID: 14, ItemID: item, Status: order.StatusRefunded,
		Reason: order.ReasonPaymentTimeout, CreatedAt: now, UpdatedAt: now}).Error; err != nil {
		t.Fatal(err)
	}
	if err := h.db.DB().Create(&store.Refund{OrderID: id, PaymentID: 1, ProviderPaymentID: "pi_1", ProviderRefundID: "re_1",
		Amount: 100, Currency: "EUR", Status: store.RefundSucceeded, CreatedAt: now, UpdatedAt: now}).Error; err != nil {
		t.Fatal(err)
	}
	r := h.do("GET", "/api/v1/orders/"+id, h.buyer(14), nil)
	expect(t, r, http.StatusOK, "")
	if v := r.json(t); v["status"] != "REFUNDED" || v["refund_id"] != "re_1" {
		t.Fatalf("view %v", v)
	}
}

func TestEventsStream(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	item := h.activeItem(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(21), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)

	expect(t, h.do("GET", "/api/v1/orders/"+id+"/events", h.buyer(22), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expect(t, h.do("GET", "/api/v1/orders/"+id+"/events", "", nil), http.StatusUnauthorized, "UNAUTHORIZED")

	next := sse(t, h.openEvents(t, id, h.buyer(21)))
	first, _ := next()
	if first.Status != order.StatusQueued || first.OrderID != id {
		t.Fatalf("first event %+v", first)
	}
	streamToPaid(t, next, first, func(v order.View) {
		if err := h.views.PublishStatus(ctx, v); err != nil {
			t.Fatal(err)
		}
	})
}

// fakeSagas records the wakes the payment desk sends.
type fakeSagas struct {
	signals chan string // "<signal> <order id>"
}

func (f *fakeSagas) Signal(_ context.Context, orderID, name string) error {
	f.signals <- name + " " + orderID
	return nil
}

type counter struct{ n atomic.Int64 }

func (c *counter) Inc() { c.n.Add(1) }

// payHarness is an API whose pay and cancel go through a real payment desk
// (real MySQL and Redis) with the sagas faked; sagas nil means Temporal is
// not reachable.
func payHarness(t *testing.T, sagas *fakeSagas) (*harness, *counter) {
	skipped := &counter{}
	get := func() (payment.Sagas, error) {
		if sagas == nil {
			return nil, apierr.ErrUnavailable
		}
		return sagas, nil
	}
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		desk, err := payment.New(d.Items.(*store.Store), d.Views.(payment.Statuses), d.Views.(payment.Views), d.Units.(payment.Reservations), get, skipped, payment.Options{WakeRate: 1000}, testkit.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); desk.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		d.Actions = desk
	})
	return h, skipped
}

// pendingOrder buys one unit and plays the saga's forward steps on the real
// database, so the order is PENDING_PAYMENT with a deadline window from now.
func (h *harness) pendingOrder(t *testing.T, item, buyer int64, window time.Duration) order.View {
	t.Helper()
	ctx := context.Background()
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(buyer), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	if _, err := h.db.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: buyer, ItemID: item}); err != nil {
		t.Fatal(err)
	}
	row, _, err := h.db.DeductStock(ctx, id, item, window)
	if err != nil || row.Status != order.StatusPendingPayment || row.PayBy == nil {
		t.Fatalf("deduct: %+v %v", row, err)
	}
	if err := h.views.PublishStatus(ctx, row.View()); err != nil { // the saga's Notify
		t.Fatal(err)
	}
	return row.View()
}

func expectSignal(t *testing.T, f *fakeSagas, want string) {
	t.Helper()
	select {
	case got := <-f.signals:
		if got != want {
			t.Fatalf("signal %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no signal %q", want)
	}
}

func TestPayAndCancelAtTheDoor(t *testing.T) {
	sagas := &fakeSagas{signals: make(chan string, 16)}
	h, _ := payHarness(t, sagas)
	item := h.activeItem(5)

	// QUEUED (no order row yet): another buyer's pay is 404; the buyer's is
	// PAID at once, settling, and wakes nothing (no saga has the unit yet).
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(30), nil)
	queued := r.json(t)["order_id"].(string)
	expect(t, h.do("POST", "/api/v1/orders/"+queued+"/pay", h.buyer(39), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	r = h.do("POST", "/api/v1/orders/"+queued+"/pay", h.buyer(30), nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "PAID" || r.json(t)["settling"] != true {
		t.Fatalf("pay of a QUEUED order %s, want PAID settling", r.body)
	}

	v := h.pendingOrder(t, item, 31, time.Minute)
	// GET shows the deadline.
	r = h.do("GET", "/api/v1/orders/"+v.OrderID, h.buyer(31), nil)
	expect(t, r, http.StatusOK, "")
	if payBy, err := time.Parse(time.RFC3339, fmt.Sprint(r.json(t)["pay_by"])); err != nil || !payBy.Equal(*v.PayBy) {
		t.Fatalf("pay_by %v (%v), want %v", r.json(t)["pay_by"], err, v.PayBy)
	}
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.buyer(32), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.admin, nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	r = h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.buyer(31), nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "PAID" {
		t.Fatalf("pay %s", r.body)
	}
	expectSignal(t, sagas, "pay "+v.OrderID)
	row, err := h.db.FindOrder(context.Background(), v.OrderID)
	if err != nil || row.Status != order.StatusPaid {
		t.Fatalf("row %+v %v", row, err)
	}
	// GET sees it at once; paying again is 200; cancelling a paid order is 409.
	r = h.do("GET", "/api/v1/orders/"+v.OrderID, h.buyer(31), nil)
	if r.json(t)["status"] != "PAID" {
		t.Fatalf("GET after pay %s", r.body)
	}
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.buyer(31), nil), http.StatusOK, "")
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/cancel", h.buyer(31), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")

	// Cancel in time: 200 CANCELLED, the saga is woken; twice is 409.
	c := h.pendingOrder(t, item, 33, time.Minute)
	r = h.do("POST", "/api/v1/orders/"+c.OrderID+"/cancel", h.buyer(33), nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "CANCELLED" || r.json(t)["reason"] != order.ReasonBuyerCancelled {
		t.Fatalf("cancel %s", r.body)
	}
	expectSignal(t, sagas, "cancel "+c.OrderID)
	expect(t, h.do("POST", "/api/v1/orders/"+c.OrderID+"/cancel", h.buyer(33), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")
	expect(t, h.do("POST", "/api/v1/orders/"+c.OrderID+"/pay", h.buyer(33), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")

	// Past the deadline: 409 at once, nothing signalled, the row untouched.
	late := h.pendingOrder(t, item, 34, time.Millisecond)
	for !time.Now().After(late.PayBy.Add(5 * time.Millisecond)) {
		time.Sleep(time.Millisecond)
	}
	expect(t, h.do("POST", "/api/v1/orders/"+late.OrderID+"/pay", h.buyer(34), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")
	expect(t, h.do("POST", "/api/v1/orders/"+late.OrderID+"/cancel", h.buyer(34), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")
	if row, _ := h.db.FindOrder(context.Background(), late.OrderID); row.Status != order.StatusPendingPayment {
		t.Fatalf("late pay changed the row: %+v", row)
	}
	select {
	case got := <-sagas.signals:
		t.Fatalf("unexpected signal %q", got)
	default:
	}
}

// With Temporal unreachable a pay is still recorded at the door and answered
// 200; the skipped wake is counted (the saga reads the row at its deadline).
func TestPayWithoutTemporal(t *testing.T) {
	h, skipped := payHarness(t, nil)
	v := h.pendingOrder(t, h.activeItem(1), 35, time.Minute)
	r := h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.buyer(35), nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "PAID" {
		t.Fatalf("pay %s", r.body)
	}
	deadline := time.Now().Add(10 * time.Second)
	for skipped.n.Load() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("skipped wake not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEventsStreamOutlivesServerTimeouts(t *testing.T) {
	h := newHarness(t, func(c *config.API, _ *api.Deps) {
		c.ReadTimeout, c.WriteTimeout = time.Second, time.Second
		c.EventsPoll = 300 * time.Millisecond
	})
	item := h.activeItem(1)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(41), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	req, _ := http.NewRequest("GET", h.ts.URL+"/api/v1/orders/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+h.buyer(41))
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	go func() {
		time.Sleep(2500 * time.Millisecond) // past both server timeouts
		v := order.View{OrderID: id, UserID: 41, ItemID: item, Status: order.StatusFailed, Reason: "test", UpdatedAt: time.Now().UTC()}
		_ = h.views.PublishStatus(context.Background(), v)
	}()
	b, err := io.ReadAll(res.Body) // ends when the stream ends after FAILED
	if err != nil {
		t.Fatalf("stream broke: %v (read %q)", err, b)
	}
	if !strings.Contains(string(b), `"status":"FAILED"`) || strings.Count(string(b), "event: status") != 2 {
		t.Fatalf("stream %q", b)
	}
}

// Every authenticated route is charged to the principal's limiter.
func TestAuthenticatedRoutesAreCharged(t *testing.T) {
	h := newHarness(t, func(c *config.API, _ *api.Deps) { c.BuyerRPS, c.BuyerBurst = 0.01, 3 })
	item := h.activeItem(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(61), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	expect(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(61), nil), http.StatusOK, "")
	expect(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(61), nil), http.StatusOK, "")
	r = h.do("GET", "/api/v1/orders/"+id, h.buyer(61), nil)
	expect(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	expect(t, h.do("GET", "/api/v1/orders/"+id+"/events", h.buyer(61), nil), http.StatusTooManyRequests, "RATE_LIMITED")
	expect(t, h.do("POST", "/api/v1/orders/"+id+"/pay", h.buyer(61), nil), http.StatusTooManyRequests, "RATE_LIMITED")
}

// A buyer cannot open event streams without limit: past the cap, 429.
func TestEventStreamsCapped(t *testing.T) {
	h := newHarness(t, func(c *config.API, _ *api.Deps) { c.StreamsPerBuyer = 1 })
	item := h.activeItem(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(71), nil)
	id := r.json(t)["order_id"].(string)
	req, _ := http.NewRequest("GET", h.ts.URL+"/api/v1/orders/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+h.buyer(71))
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	// The first stream is open once its first event arrived.
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "event: status") {
		t.Fatalf("first stream: %q %v", line, err)
	}
	expect(t, h.do("GET", "/api/v1/orders/"+id+"/events", h.buyer(71), nil), http.StatusTooManyRequests, "RATE_LIMITED")
	// Another buyer is not affected by this buyer's cap.
	r2 := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(72), nil)
	id2 := r2.json(t)["order_id"].(string)
	req2, _ := http.NewRequest("GET", h.ts.URL+"/api/v1/orders/"+id2+"/events", nil)
	req2.Header.Set("Authorization", "Bearer "+h.buyer(72))
	res2, err := h.ts.Client().Do(req2)
	if err != nil {
		t.Fatal(err)
	}
	defer res2.Body.Close()
	if res2.StatusCode != http.StatusOK {
		t.Fatalf("other buyer's stream: %d", res2.StatusCode)
	}
}

// Behind a trusted load balancer the client address comes from
// X-Forwarded-For; from anyone else the header is ignored.
func TestTrustedProxies(t *testing.T) {
	trusted := newHarness(t, func(c *config.API, _ *api.Deps) {
		c.IPRPS, c.IPBurst, c.TrustedProxies = 0.01, 1, []string{"127.0.0.1/32", "::1/128"}
	})
	trusted.checkForwardedBuckets(t, trusted.activeItem(1))

	untrusted := newHarness(t, func(c *config.API, _ *api.Deps) { c.IPRPS, c.IPBurst = 0.01, 1 })
	item := untrusted.activeItem(1)
	expect(t, untrusted.getForwarded(item, "198.51.100.1"), http.StatusOK, "")
	// A forged header buys no fresh bucket: the peer address counts.
	expect(t, untrusted.getForwarded(item, "198.51.100.2"), http.StatusTooManyRequests, "RATE_LIMITED")
}

// /readyz evaluates its checks at most once a second and names what is down
// without internal details (addresses, errors).
func TestReadyzCachedAndDiscreet(t *testing.T) {
	var calls atomic.Int64
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{
			"redis":    func(context.Context) error { calls.Add(1); return nil },
			"rocketmq": api.TCPCheck("127.0.0.1:1"),
		}
	})
	for range 10 {
		r := h.do("GET", "/readyz", "", nil)
		expect(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
		if strings.Contains(string(r.body), "127.0.0.1") || strings.Contains(string(r.body), "refused") {
			t.Fatalf("readyz leaks details: %s", r.body)
		}
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("checks evaluated %d times for 10 probes within a second, want 1", n)
	}
}

// The control room's "payable" is 202 -> the first pay the door accepted,
// each order once, whether it was QUEUED or PENDING_PAYMENT when paid.
func TestControlRoomFirstPayAtTheDoor(t *testing.T) {
	h, _ := payHarness(t, &fakeSagas{signals: make(chan string, 16)})
	item := h.activeItem(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(40), nil)
	expect(t, r, http.StatusAccepted, "")
	queued := r.json(t)["order_id"].(string)
	pending := h.pendingOrder(t, item, 41, time.Minute)
	const wait = 400 * time.Millisecond // the buyers take their time
	time.Sleep(wait)
	for range 2 { // the second pay of each is a repeat, not counted
		expect(t, h.do("POST", "/api/v1/orders/"+queued+"/pay", h.buyer(40), nil), http.StatusOK, "")
		expect(t, h.do("POST", "/api/v1/orders/"+pending.OrderID+"/pay", h.buyer(41), nil), http.StatusOK, "")
	}
	var got controlroom.PayableLatency
	for deadline := time.Now().Add(10 * time.Second); got.Count < 2; time.Sleep(50 * time.Millisecond) {
		r := h.do("GET", "/api/v1/admin/summary", h.admin, nil)
		expect(t, r, http.StatusOK, "")
		var s struct {
			Sales []struct {
				Item    sale.ItemView              `json:"item"`
				Payable controlroom.PayableLatency `json:"payable"`
			} `json:"sales"`
		}
		if err := json.Unmarshal(r.body, &s); err != nil {
			t.Fatal(err)
		}
		for _, sale := range s.Sales {
			if sale.Item.ID == item {
				got = sale.Payable
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary %s", r.body)
		}
	}
	// Each about 400 ms plus the request; a bucket is about 22 % wide.
	if got.Count != 2 || got.P50MS == nil || *got.P50MS < 300 || *got.P50MS > 2000 || got.P99MS == nil || *got.P99MS > 2000 {
		t.Fatalf("202 -> first pay %+v, want 2 pays after about %s", got, wait)
	}
}
