package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Fuzz targets over every handler on the in-memory dependencies: each
// iteration is one request served in memory, with fuzzed path parameters,
// Authorization header and body, and now and then one dependency failing.
// The invariants hold for every route:
//   - no 500 (a panic the recovery turned into INTERNAL, or an error the code
//     does not map); a 5xx only as 503, and only when a dependency failed;
//   - every 4xx/5xx carries {"error":{"code":...,"message":...}} as JSON;
//   - every other answer is JSON (the event stream excepted);
//   - a redirect stays on this host.
// Run one: go test -run=XXX -fuzz='^FuzzUnitOrders$' -fuzztime=30s ./api/
// (make fuzz runs them all).

// injected is the failure an input selects: none most of the time, else one
// dependency down (connection refused or timed out), or for the reservation
// an error reply of any kind.
func injected(h *unitHarness, sel uint8) bool {
	which := int(sel) % (failKinds + 3) // failNone three times as likely
	if which >= failKinds {
		which = failNone
	}
	var err error
	switch sel / 32 % 3 {
	case 0:
		err = errDown
	case 1:
		err = fmt.Errorf("query: %w", context.DeadlineExceeded)
	default:
		err = errDown
		if which == failReserve {
			err = errors.New("OOM command not allowed when used memory > 'maxmemory'")
		}
	}
	return h.inject(which, err)
}

// failSel is an input byte that makes injected pick which with kind (0
// refused, 1 timed out, 2 an error reply for the reservation): for seeds.
func failSel(which, kind int) uint8 {
	for b := range 256 {
		if b%(failKinds+3) == which && b/32%3 == kind {
			return uint8(b)
		}
	}
	panic("no selector")
}

// authHeader is the Authorization header an input selects: the fuzzed text
// as it is, or a valid token of a fuzzed user and role.
func authHeader(t *testing.T, sel uint8, raw string, user uint16) (hdr string, p auth.Principal) {
	id := int64(user%64) + 1
	switch sel % 4 {
	case 0:
		return raw, auth.Principal{}
	case 1:
		return "Bearer " + raw, auth.Principal{}
	case 2:
		p = auth.Principal{UserID: id, Role: auth.RoleBuyer}
	default:
		p = auth.Principal{UserID: id, Role: auth.RoleAdmin}
	}
	tok, err := auth.Sign(testSecret, p.UserID, p.Role, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return "Bearer " + tok, p
}

// request builds a request for path (any bytes: it goes into URL.Path as
// the router sees it after decoding).
func request(method, path, authz string, body []byte) *http.Request {
	req := httptest.NewRequest("POST", "/", bytes.NewReader(body))
	req.Method = method
	req.URL = &url.URL{Path: path} // as net/http parses a request line
	if authz != "" {
		req.Header["Authorization"] = []string{authz}
	}
	return req
}

// streamRecorder ends an event stream after its first flush: the target
// checks the headers and the first event, not the wait for the next.
type streamRecorder struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (w *streamRecorder) Flush() {
	w.ResponseRecorder.Flush()
	w.cancel()
}

// serveUnit serves req in memory and checks the invariants; it returns the
// answer for the target's own checks.
func serveUnit(t *testing.T, h *unitHarness, req *http.Request, failing bool) *httptest.ResponseRecorder {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
	defer cancel()
	rec := &streamRecorder{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	h.srv.Engine().ServeHTTP(rec, req.WithContext(ctx))
	code, body, ct := rec.Code, rec.Body.Bytes(), rec.Header().Get("Content-Type")
	what := fmt.Sprintf("%s %q (failing %v) -> %d %q", req.Method, req.URL.Path, failing, code, body)
	switch {
	case code >= 500 && (code != http.StatusServiceUnavailable || !failing):
		t.Fatalf("%s", what)
	case code >= 300 && code < 400:
		if loc := rec.Header().Get("Location"); !strings.HasPrefix(loc, "/") || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, "/\\") {
			t.Fatalf("%s: redirect to %q", what, loc)
		}
		return rec.ResponseRecorder
	case code >= 400:
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("%s: not the JSON error shape (%v)", what, err)
		}
	case strings.HasPrefix(ct, "text/event-stream") && strings.HasSuffix(req.URL.Path, "/events"):
		if !bytes.HasPrefix(body, []byte("event: status\ndata: {")) {
			t.Fatalf("%s: stream does not start with the order", what)
		}
		return rec.ResponseRecorder
	case strings.HasPrefix(ct, "text/plain") && req.URL.Path == "/metrics":
		return rec.ResponseRecorder
	case req.Method == "GET" && (req.URL.Path == "/" || req.URL.Path == "/admin" || strings.HasPrefix(req.URL.Path, "/assets/")):
		// The pages (package web): HTML, CSS and JavaScript, never JSON.
		if ct == "" || strings.HasPrefix(ct, "application/json") {
			t.Fatalf("%s: a page served as %q", what, ct)
		}
		return rec.ResponseRecorder
	default:
		if !json.Valid(body) {
			t.Fatalf("%s: body is not JSON", what)
		}
	}
	if !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s: Content-Type %q", what, ct)
	}
	return rec.ResponseRecorder
}

// newFuzzServer is a fake-backed server whose limits stay out of the way of
// millions of requests.
func newFuzzServer(f *testing.F) *unitHarness {
	return newUnitServer(f, func(c *config.API, d *api.Deps) {
		c.BuyerRPS, c.BuyerBurst = 1e9, 1e9
		c.IPRPS, c.IPBurst = 1e9, 1e9
		d.Log = slog.New(slog.DiscardHandler) // the injected failures' warnings
	})
}

// item create / get / warmup.
func FuzzUnitItems(f *testing.F) {
	h := newFuzzServer(f)
	item := h.onSale(10)
	h.item(5, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	valid := `{"name":"phone","price_cents":100,"stock_total":5,"start_at":"2030-01-01T00:00:00Z","end_at":"2030-01-02T00:00:00Z"}`
	f.Add(uint8(0), strconv.FormatInt(item, 10), "", uint16(0), uint8(3), []byte(valid), uint8(0))
	f.Add(uint8(0), "", "x", uint16(1), uint8(2), []byte(valid), uint8(0))
	f.Add(uint8(0), "", "", uint16(0), uint8(3), []byte(`{"name":"\u0000","price_cents":1e400,"stock_total":"5"}`), uint8(0))
	f.Add(uint8(0), "", "", uint16(0), uint8(3), []byte(`{"name":"x","price_cents":1,"stock":1,"start_at":"9998-12-31T23:59:59-23:59","end_at":"9998-12-31T23:59:59.999999999Z"}`), uint8(0))
	f.Add(uint8(0), "", "", uint16(0), uint8(3), []byte(valid), failSel(failItems, 0))
	f.Add(uint8(0), "", "", uint16(0), uint8(3), []byte(valid), failSel(failUnits, 0))
	f.Add(uint8(1), strconv.FormatInt(item, 10), "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(1), "99999999999999999999", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(1), "7/../1", "", uint16(0), uint8(0), []byte(nil), failSel(failItems, 0))
	f.Add(uint8(1), "123", "", uint16(0), uint8(0), []byte(nil), failSel(failItems, 1))
	f.Add(uint8(2), strconv.FormatInt(item, 10), "", uint16(0), uint8(3), []byte(nil), failSel(failUnits, 0))
	f.Add(uint8(2), "1", "", uint16(0), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), strconv.FormatInt(item, 10)+"/", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, route uint8, id, rawAuth string, user uint16, authSel uint8, body []byte, fail uint8) {
		failing := injected(h, fail)
		defer h.inject(failNone, nil)
		if id == "" {
			id = strconv.FormatInt(item, 10)
		}
		authz, _ := authHeader(t, authSel, rawAuth, user)
		var req *http.Request
		switch route % 4 {
		case 0:
			req = request("POST", "/api/v1/items", authz, body)
		case 1:
			req = request("GET", "/api/v1/items/"+id, authz, body)
		case 2:
			req = request("POST", "/api/v1/items/"+id+"/warmup", authz, body)
		default: // a method the route does not have
			req = request([]string{"PUT", "DELETE", "PATCH", "GET"}[route/4%4], "/api/v1/items/"+id, authz, body)
		}
		rec := serveUnit(t, h, req, failing)
		if admin := route%4 == 0 || route%4 == 2; admin && rec.Code < 300 && authSel%4 != 3 {
			t.Fatalf("%s %q answered %d to a non-admin", req.Method, req.URL.Path, rec.Code)
		}
	})
}

// purchase.
func FuzzUnitPurchase(f *testing.F) {
	h := newFuzzServer(f)
	item := h.onSale(1_000_000_000)
	one := h.onSale(1)
	soon := h.item(5, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))
	ids := []int64{item, one, soon}
	f.Add(uint8(0), "", "", uint16(1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(1), "", "", uint16(2), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(2), "", "", uint16(3), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), "abc", "", uint16(1), uint8(2), []byte("{}"), uint8(0))
	f.Add(uint8(3), "-1", "", uint16(1), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(3), "31337", "", uint16(1), uint8(2), []byte(nil), failSel(failItems, 0))
	f.Add(uint8(0), "", "", uint16(4), uint8(2), []byte(nil), failSel(failReserve, 0))
	f.Add(uint8(0), "", "", uint16(5), uint8(2), []byte(nil), failSel(failReserve, 2))
	f.Add(uint8(0), "", "", uint16(6), uint8(2), []byte(nil), failSel(failUnits, 1))
	f.Add(uint8(0), "", "x.y.z", uint16(1), uint8(1), []byte(nil), uint8(0))
	f.Add(uint8(0), "", "", uint16(1), uint8(3), []byte(nil), uint8(0))
	f.Add(uint8(3), "1%2F..%2F", "eyJhbGciOiJub25lIn0.eyJzdWIiOiIxIiwicm9sZSI6ImJ1eWVyIn0.", uint16(0), uint8(1), []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, which uint8, id, rawAuth string, user uint16, authSel uint8, body []byte, fail uint8) {
		failing := injected(h, fail)
		defer h.inject(failNone, nil)
		if which%4 < 3 {
			id = strconv.FormatInt(ids[which%4], 10)
		}
		authz, p := authHeader(t, authSel, rawAuth, user)
		rec := serveUnit(t, h, request("POST", "/api/v1/seckill/"+id, authz, body), failing)
		if rec.Code == http.StatusAccepted {
			var b struct {
				OrderID string `json:"order_id"`
				Status  string `json:"status"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &b)
			if p.Role != auth.RoleBuyer || !order.ValidID(b.OrderID) || b.Status != "QUEUED" ||
				rec.Header().Get("Location") != "/api/v1/orders/"+b.OrderID {
				t.Fatalf("202 to %+v: %v %s", p, rec.Header(), rec.Body.Bytes())
			}
			if got, ok, _ := h.units.BuyerOrder(context.Background(), ids[which%4], p.UserID); !ok || got != b.OrderID {
				t.Fatalf("202 with order %s, the buyer's mark is %q", b.OrderID, got)
			}
		}
		if left := h.units.unitsLeft(one); left < 0 {
			t.Fatalf("stock below zero: %d", left)
		}
	})
}

// order get / events / pay / cancel.
func FuzzUnitOrders(f *testing.F) {
	h := newFuzzServer(f)
	item := h.onSale(1_000_000)
	const owner = 7
	pending := h.pendingOrder(item, owner, time.Hour)
	queued := order.NewID()
	h.views.publish(order.View{OrderID: queued, ItemID: item, UserID: owner, Status: order.StatusQueued,
		CreatedAt: time.Now().UTC(), UpdatedAt: time.Now().UTC()})
	ids := []string{pending.OrderID, queued}
	f.Add(uint8(0), uint8(0), "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(1), uint8(0), "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(2), uint8(0), "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), uint8(0), "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(2), uint8(0), "", "", uint16(owner-1), uint8(3), []byte(nil), uint8(0))
	f.Add(uint8(2), uint8(1), "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(0), uint8(2), "not-an-id", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(0), uint8(2), "01ARZ3NDEKTSV4RRFFQ69G5FAV", "", uint16(owner-1), uint8(2), []byte(nil), failSel(failOrders, 0))
	f.Add(uint8(0), uint8(1), "", "", uint16(owner-1), uint8(2), []byte(nil), failSel(failViews, 0))
	f.Add(uint8(2), uint8(0), "", "", uint16(owner-1), uint8(2), []byte(nil), failSel(failActions, 0))
	f.Add(uint8(1), uint8(0), "", "", uint16(owner), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), uint8(0), "", "Bearer", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, route, which uint8, id, rawAuth string, user uint16, authSel uint8, body []byte, fail uint8) {
		// Every iteration starts from the same orders: a pending one with
		// its row and view, a QUEUED one with its view only.
		h.orders.put(storeOrder(pending))
		h.views.publish(pending)
		failing := injected(h, fail)
		defer h.inject(failNone, nil)
		if which%3 < 2 {
			id = ids[which%3]
		}
		authz, p := authHeader(t, authSel, rawAuth, user)
		var req *http.Request
		switch route % 4 {
		case 0:
			req = request("GET", "/api/v1/orders/"+id, authz, body)
		case 1:
			req = request("GET", "/api/v1/orders/"+id+"/events", authz, body)
		case 2:
			req = request("POST", "/api/v1/orders/"+id+"/pay", authz, body)
		default:
			req = request("POST", "/api/v1/orders/"+id+"/cancel", authz, body)
		}
		rec := serveUnit(t, h, req, failing)
		if rec.Code >= 300 {
			return
		}
		// Only the owner sees the order, or an admin on GET and events;
		// only the owning buyer pays or cancels.
		owns := p.Role == auth.RoleBuyer && p.UserID == owner
		if !owns && (route%4 >= 2 || p.Role != auth.RoleAdmin) {
			t.Fatalf("%s %q answered %d to %+v", req.Method, req.URL.Path, rec.Code, p)
		}
		if route%4 == 1 {
			return
		}
		var v order.View
		if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || !order.ValidID(v.OrderID) || v.UserID != owner {
			t.Fatalf("%s %q: order %s (%v)", req.Method, req.URL.Path, rec.Body.Bytes(), err)
		}
	})
}

// health, metrics and anything else: any method, any path.
func FuzzUnitRouter(f *testing.F) {
	h := newUnitServer(f, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{"redis": func(ctx context.Context) error { return ctx.Err() }}
		d.Log = slog.New(slog.DiscardHandler)
	})
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/", "/api/v1/items/", "//api/v1/items/1", "/api/v1/items/1/",
		"/api/v1/../healthz", "/API/V1/ITEMS/1", "/api/v1/orders/x/events/", "/\\evil.example/", "/api/v1/items",
		"/api/v1/orders", "/api/v1/orders/", "/api/v1/items/1/end/", "/api/v1/items/1/stock"} {
		f.Add("GET", p, "")
	}
	f.Add("POST", "/healthz", "")
	f.Add("OPTIONS", "/api/v1/seckill/1", "")
	f.Add("HEAD", "/readyz", "")
	f.Fuzz(func(t *testing.T, method, path, authz string) {
		if !isToken(method) || !strings.HasPrefix(path, "/") {
			return // not a request line net/http would pass on
		}
		serveUnit(t, h, request(method, path, authz, nil), false)
	})
}

// the pages' own routes: the server's clock, the development sign-in, the
// control room's summary, the embedded files.
func FuzzUnitPages(f *testing.F) {
	h := newUnitServer(f, func(c *config.API, d *api.Deps) {
		c.BuyerRPS, c.BuyerBurst = 1e9, 1e9
		c.IPRPS, c.IPBurst = 1e9, 1e9
		d.Log = slog.New(slog.DiscardHandler)
		d.DevSecret = testSecret
		d.Temporal.UIURL = "http://127.0.0.1:8233"
	})
	h.onSale(10)
	f.Add(uint8(0), "", "", uint16(1), uint8(0), []byte(`{"user_id":1001}`), uint8(0))
	f.Add(uint8(0), "", "", uint16(1), uint8(0), []byte(`{"user_id":1,"role":"admin"}`), uint8(0))
	f.Add(uint8(0), "", "", uint16(1), uint8(0), []byte(`{"user_id":-1,"role":"root"}`), uint8(0))
	f.Add(uint8(0), "", "", uint16(1), uint8(0), []byte(`[1e999]`), uint8(0))
	f.Add(uint8(1), "", "", uint16(1), uint8(3), []byte(nil), uint8(0))
	f.Add(uint8(1), "", "", uint16(1), uint8(3), []byte(nil), failSel(failUnits, 0))
	f.Add(uint8(1), "", "", uint16(1), uint8(3), []byte(nil), failSel(failOrders, 0))
	f.Add(uint8(1), "", "", uint16(2), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(2), "", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(3), "store.js", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(3), "../index.html", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(3), "%2e%2e/web.go", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Fuzz(func(t *testing.T, route uint8, file, rawAuth string, user uint16, authSel uint8, body []byte, fail uint8) {
		failing := injected(h, fail)
		defer h.inject(failNone, nil)
		authz, _ := authHeader(t, authSel, rawAuth, user)
		var req *http.Request
		switch route % 4 {
		case 0:
			req = request("POST", "/api/v1/dev/token", authz, body)
		case 1:
			req = request("GET", "/api/v1/admin/summary", authz, body)
		case 2:
			req = request("GET", "/api/v1/time", authz, body)
		default:
			if strings.ContainsAny(file, "?# \t\r\n") {
				return
			}
			req = request("GET", "/assets/"+file, authz, body)
		}
		rec := serveUnit(t, h, req, failing)
		if route%4 == 1 && rec.Code < 300 && authSel%4 != 3 {
			t.Fatalf("the summary answered %d to a non-admin", rec.Code)
		}
	})
}

// storeOrder is the order row behind a view.
func storeOrder(v order.View) store.Order {
	return store.Order{OrderID: v.OrderID, UserID: v.UserID, ItemID: v.ItemID, Status: v.Status, Reason: v.Reason,
		PayBy: v.PayBy, CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt}
}

// isToken reports whether s is an HTTP token (what net/http accepts as a
// method).
func isToken(s string) bool {
	for _, r := range s {
		if r > 0x7e || r <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", r) {
			return false
		}
	}
	return s != ""
}

// sale controls (end, add units) and the lists (items, a buyer's orders).
func FuzzUnitSaleControls(f *testing.F) {
	h := newFuzzServer(f)
	item := h.onSale(1_000_000)
	ended := h.item(5, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Minute))
	const owner = 7
	h.pendingOrder(item, owner, time.Hour)
	f.Add(uint8(0), uint8(0), "", "", "", uint16(0), uint8(3), []byte(nil), uint8(0))
	f.Add(uint8(0), uint8(1), "", "", "", uint16(0), uint8(3), []byte(nil), uint8(0))
	f.Add(uint8(0), uint8(2), "abc", "", "", uint16(0), uint8(3), []byte(nil), failSel(failItems, 0))
	f.Add(uint8(0), uint8(0), "", "", "", uint16(0), uint8(3), []byte(nil), failSel(failUnits, 0))
	f.Add(uint8(1), uint8(0), "", "", "", uint16(0), uint8(3), []byte(`{"add":5}`), uint8(0))
	f.Add(uint8(1), uint8(1), "", "", "", uint16(0), uint8(3), []byte(`{"add":5}`), uint8(0))
	f.Add(uint8(1), uint8(0), "", "", "", uint16(0), uint8(3), []byte(`{"add":1000001}`), uint8(0))
	f.Add(uint8(1), uint8(0), "", "", "", uint16(0), uint8(3), []byte(`{"add":1e3}`), uint8(0))
	f.Add(uint8(1), uint8(0), "", "", "", uint16(0), uint8(2), []byte(`{"add":5}`), uint8(0))
	f.Add(uint8(1), uint8(0), "", "", "", uint16(0), uint8(3), []byte(`{"add":5}`), failSel(failUnits, 1))
	f.Add(uint8(2), uint8(0), "", "status=ACTIVE", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(2), uint8(0), "", "status=nope", "", uint16(0), uint8(0), []byte(nil), uint8(0))
	f.Add(uint8(2), uint8(0), "", "status=ended,upcoming&status=x", "", uint16(0), uint8(0), []byte(nil), failSel(failUnits, 0))
	f.Add(uint8(3), uint8(0), "", "", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), uint8(0), "", "limit=1&cursor=01ARZ3NDEKTSV4RRFFQ69G5FAV", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), uint8(0), "", "limit=0", "", uint16(owner-1), uint8(2), []byte(nil), uint8(0))
	f.Add(uint8(3), uint8(0), "", "cursor=zzz", "", uint16(owner-1), uint8(2), []byte(nil), failSel(failOrders, 0))
	f.Add(uint8(3), uint8(0), "", "", "", uint16(owner-1), uint8(3), []byte(nil), failSel(failUnits, 0))
	f.Fuzz(func(t *testing.T, route, which uint8, id, query, rawAuth string, user uint16, authSel uint8, body []byte, fail uint8) {
		failing := injected(h, fail)
		defer h.inject(failNone, nil)
		switch which % 3 {
		case 0: // a fresh sale each time, so that an end or add finds one to act on
			h.inject(failNone, nil)
			id = strconv.FormatInt(h.onSale(10), 10)
			injected(h, fail)
		case 1:
			id = strconv.FormatInt(ended, 10)
		}
		authz, p := authHeader(t, authSel, rawAuth, user)
		var req *http.Request
		switch route % 4 {
		case 0:
			req = request("POST", "/api/v1/items/"+id+"/end", authz, body)
		case 1:
			req = request("POST", "/api/v1/items/"+id+"/stock", authz, body)
		case 2:
			req = request("GET", "/api/v1/items", authz, body)
		default:
			req = request("GET", "/api/v1/orders", authz, body)
		}
		req.URL.RawQuery = query
		rec := serveUnit(t, h, req, failing)
		if rec.Code >= 300 {
			return
		}
		switch route % 4 {
		case 0, 1:
			if p.Role != auth.RoleAdmin {
				t.Fatalf("%s %q answered %d to %+v", req.Method, req.URL.Path, rec.Code, p)
			}
			var v sale.ItemView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.ID <= 0 || v.StockTotal <= 0 ||
				route%4 == 0 && v.Status != sale.ItemEnded || v.StockLeft < 0 {
				t.Fatalf("%s %q: item %s (%v)", req.Method, req.URL.Path, rec.Body.Bytes(), err)
			}
		case 3:
			var b struct {
				Orders []order.View `json:"orders"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil || p.Role != auth.RoleBuyer {
				t.Fatalf("orders %s to %+v (%v)", rec.Body.Bytes(), p, err)
			}
			for _, v := range b.Orders {
				if v.UserID != p.UserID {
					t.Fatalf("buyer %d was shown an order of buyer %d", p.UserID, v.UserID)
				}
			}
		}
	})
}
