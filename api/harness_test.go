package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

var testSecret = []byte("test-secret")

// harness is one API server on the real Redis and a private MySQL database.
type harness struct {
	t     testing.TB
	srv   *api.Server
	ts    *httptest.Server
	db    *store.Store
	stk   *stock.Store
	views *orderstatus.Board
	ob    *outbox.Stream
	rdb   redis.UniversalClient
	cfg   config.API
	admin string
}

type harnessOpt func(*config.API, *api.Deps)

// testAPIConfig is config.API with limits that stay out of the way.
func testAPIConfig(t testing.TB) config.API {
	c := testkit.Config(t).API
	c.GlobalRPS, c.GlobalBurst = 1e6, 1e6
	c.BuyerRPS, c.BuyerBurst = 1000, 1000
	c.IPRPS, c.IPBurst = 1e6, 1e6
	c.ItemRefresh = 200 * time.Millisecond
	c.EventsPoll = 500 * time.Millisecond
	return c
}

func newHarness(t testing.TB, opts ...harnessOpt) *harness {
	t.Helper()
	db, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	stk := stock.New(rdb, prefix)
	views := orderstatus.New(rdb, prefix)
	cfg := testAPIConfig(t)
	deps := api.Deps{
		Items: db, Stock: db, Orders: db, Units: stk, Views: views, Tokens: auth.NewVerifier(testSecret),
		Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: testkit.Logger(t),
	}
	for _, opt := range opts {
		opt(&cfg, &deps)
	}
	srv := api.New(cfg, deps)
	run(t, srv)
	h := &harness{t: t, srv: srv, ts: listen(t, srv), db: db, stk: stk, views: views, ob: outbox.New(rdb, prefix), rdb: rdb, cfg: cfg}
	h.admin = h.token(1, auth.RoleAdmin)
	return h
}

// run runs the server's background work until the test ends.
func run(t testing.TB, srv *api.Server) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// listen serves every route on an httptest server with the production
// http.Server settings, closed when the test ends (before run's cleanup).
func listen(t testing.TB, srv *api.Server) *httptest.Server {
	ts := httptest.NewUnstartedServer(srv.Engine())
	ts.Config = srv.HTTPServer()
	ts.Config.Handler = srv.Engine()
	ts.Start()
	t.Cleanup(ts.Close)
	return ts
}

func (h *harness) token(user int64, role auth.Role) string {
	h.t.Helper()
	tok, err := auth.Sign(testSecret, user, role, time.Hour, time.Now())
	if err != nil {
		h.t.Fatal(err)
	}
	return tok
}

func (h *harness) buyer(user int64) string { return h.token(user, auth.RoleBuyer) }

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.body, &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

// errCode returns error.code of an error body ("" if none).
func (r response) errCode() string {
	var b struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			OrderID string `json:"order_id"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (h *harness) do(method, path, token string, body any) response {
	h.t.Helper()
	return h.doKey(method, path, token, "", body)
}

// doKey is do with an Idempotency-Key header (none when key is "").
func (h *harness) doKey(method, path, token, key string, body any) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, h.ts.URL+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	res, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	checkOpenAPI(h.t, req, res.StatusCode, res.Header, b)
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// expect checks the status and, for errors, the JSON error code.
func expect(t testing.TB, r response, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" && r.errCode() != code {
		t.Fatalf("error code %q, want %q; body %s", r.errCode(), code, r.body)
	}
}

// newItem creates an item through the API and returns its id.
func (h *harness) newItem(units int64, start, end time.Time) int64 {
	h.t.Helper()
	r := h.do("POST", "/api/v1/items", h.admin, map[string]any{
		"name": "item", "price_cents": 100, "stock_total": units,
		"start_at": start.Format(time.RFC3339Nano), "end_at": end.Format(time.RFC3339Nano),
	})
	expect(h.t, r, http.StatusCreated, "")
	return int64(r.json(h.t)["id"].(float64))
}

// activeItem is an item on sale now.
func (h *harness) activeItem(units int64) int64 {
	return h.newItem(units, time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
}

// The checks below are shared by the tests on the fakes and on the real
// services: one statement of each answer, whichever adapters serve it.

// expectErr is expect plus the JSON error body.
func expectErr(t testing.TB, r response, status int, code string) {
	t.Helper()
	expect(t, r, status, code)
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q, want JSON; body %s", ct, r.body)
	}
	e, ok := r.json(t)["error"].(map[string]any)
	if !ok || e["code"] != code || e["message"] == "" {
		t.Fatalf("error body %s", r.body)
	}
}

func retryAfter(t testing.TB, r response, lo, hi int) {
	t.Helper()
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < lo || ra > hi {
		t.Fatalf("Retry-After %q, want %d-%d", r.header.Get("Retry-After"), lo, hi)
	}
}

// createdItem checks a 201 of POST /api/v1/items and returns the item.
func createdItem(t testing.TB, r response) sale.ItemView {
	t.Helper()
	expect(t, r, http.StatusCreated, "")
	var it sale.ItemView
	if err := json.Unmarshal(r.body, &it); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "name", "price_cents", "stock_total", "stock_left", "start_at", "end_at", "payment_timeout_seconds", "status"} {
		if _, ok := r.json(t)[k]; !ok {
			t.Fatalf("item JSON lacks %s: %s", k, r.body)
		}
	}
	return it
}

// accepted checks a purchase's 202 (body and Location) and returns the order id.
func accepted(t testing.TB, r response) string {
	t.Helper()
	expect(t, r, http.StatusAccepted, "")
	body := r.json(t)
	orderID, _ := body["order_id"].(string)
	if !order.ValidID(orderID) || body["status"] != "QUEUED" {
		t.Fatalf("202 body %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/orders/"+orderID {
		t.Fatalf("Location %q", loc)
	}
	return orderID
}

// checkOrderAccess checks GET /api/v1/orders/:id of buyer 11's QUEUED order
// of item: the buyer and an admin see it, anyone else is refused, unknown
// and malformed ids are 404.
func (h *harness) checkOrderAccess(t *testing.T, id string, item int64) order.View {
	t.Helper()
	r := h.do("GET", "/api/v1/orders/"+id, h.buyer(11), nil)
	expect(t, r, http.StatusOK, "")
	var v order.View
	if err := json.Unmarshal(r.body, &v); err != nil || v.OrderID != id || v.Status != order.StatusQueued ||
		v.UserID != 11 || v.ItemID != item {
		t.Fatalf("order %s (%v)", r.body, err)
	}
	for _, k := range []string{"order_id", "item_id", "user_id", "status", "reason", "created_at", "updated_at"} {
		if _, ok := r.json(t)[k]; !ok {
			t.Fatalf("order JSON lacks %s", k)
		}
	}
	expectErr(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(12), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expect(t, h.do("GET", "/api/v1/orders/"+id, h.admin, nil), http.StatusOK, "")
	expectErr(t, h.do("GET", "/api/v1/orders/"+id, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("GET", "/api/v1/orders/"+order.NewID(), h.buyer(11), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expectErr(t, h.do("GET", "/api/v1/orders/not-an-id", h.buyer(11), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	return v
}

// checkPaidRow checks that order id, a PAID row of buyer 13 with no view in
// Redis, is answered from the row, to its buyer only.
func (h *harness) checkPaidRow(t *testing.T, id string) {
	t.Helper()
	r := h.do("GET", "/api/v1/orders/"+id, h.buyer(13), nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "PAID" {
		t.Fatalf("db order %s", r.body)
	}
	expectErr(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(11), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
}

func (h *harness) openEvents(t *testing.T, id, token string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", h.ts.URL+"/api/v1/orders/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = res.Body.Close() })
	return res
}

// sse reads an event stream's status events; next waits for the next one
// (false once the stream ended).
func sse(t *testing.T, res *http.Response) (next func() (order.View, bool)) {
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") ||
		res.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("events: %d %v", res.StatusCode, res.Header)
	}
	events := make(chan order.View, 10)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(res.Body)
		var ev string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				ev = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && ev == "status":
				var v order.View
				if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v); err != nil {
					t.Errorf("event data %q: %v", line, err)
				}
				events <- v
			}
		}
	}()
	return func() (order.View, bool) {
		t.Helper()
		select {
		case v, ok := <-events:
			return v, ok
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5s")
		}
		return order.View{}, false
	}
}

// streamToPaid publishes PENDING_PAYMENT then PAID after the stream's first
// event and checks each is streamed, then that the stream ends.
func streamToPaid(t *testing.T, next func() (order.View, bool), first order.View, publish func(order.View)) {
	t.Helper()
	v := first
	for _, st := range []order.Status{order.StatusPendingPayment, order.StatusPaid} {
		v.Status, v.UpdatedAt = st, time.Now().UTC()
		publish(v)
		if got, _ := next(); got.Status != st {
			t.Fatalf("event %+v, want %s", got, st)
		}
	}
	if _, ok := next(); ok {
		t.Fatal("stream did not end after a final status")
	}
}

// getForwarded is GET /api/v1/items/:item from the client xff names in
// X-Forwarded-For.
func (h *harness) getForwarded(item int64, xff string) response {
	h.t.Helper()
	req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/items/%d", h.ts.URL, item), nil)
	req.Header.Set("X-Forwarded-For", xff)
	res, err := h.ts.Client().Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return response{status: res.StatusCode, header: res.Header, body: body}
}

// checkForwardedBuckets checks that behind a trusted proxy (IP limit of one
// request) each forwarded client has its own bucket.
func (h *harness) checkForwardedBuckets(t *testing.T, item int64) {
	t.Helper()
	expect(t, h.getForwarded(item, "198.51.100.1"), http.StatusOK, "")
	expect(t, h.getForwarded(item, "198.51.100.2"), http.StatusOK, "") // another client: its own bucket
	expect(t, h.getForwarded(item, "198.51.100.1"), http.StatusTooManyRequests, "RATE_LIMITED")
}

// checkPurchaseRefused checks the purchase answers that need no unit: no
// token, not a buyer, a bad or unknown item id, a sale not started or ended
// (newItem makes an item of 5 units selling from start to end).
func (h *harness) checkPurchaseRefused(t *testing.T, path string, newItem func(units int64, start, end time.Time) int64) {
	t.Helper()
	expectErr(t, h.do("POST", path, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", path, h.admin, nil), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("POST", "/api/v1/seckill/abc", h.buyer(1), nil), http.StatusBadRequest, "BAD_REQUEST")
	expectErr(t, h.do("POST", "/api/v1/seckill/0", h.buyer(1), nil), http.StatusBadRequest, "BAD_REQUEST")
	expectErr(t, h.do("POST", "/api/v1/seckill/777777", h.buyer(1), nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	soon := newItem(5, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	expectErr(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", soon), h.buyer(1), nil), http.StatusForbidden, "SALE_NOT_STARTED")
	over := newItem(5, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
	expectErr(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", over), h.buyer(1), nil), http.StatusForbidden, "SALE_ENDED")
}
