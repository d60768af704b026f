package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// itemBody decodes an item view.
func itemBody(t testing.TB, r response) sale.ItemView {
	t.Helper()
	var v sale.ItemView
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("item body %q: %v", r.body, err)
	}
	return v
}

// cached makes the server cache an item made in the fake MySQL (as GET does).
func (h *unitHarness) cached(id int64) int64 {
	expect(h.t, h.do("GET", fmt.Sprintf("/api/v1/items/%d", id), "", nil), http.StatusOK, "")
	return id
}

func TestUnitEndSale(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(5))
	end := fmt.Sprintf("/api/v1/items/%d/end", item)
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	r := h.do("POST", buy, h.buyer(1), nil)
	expect(t, r, http.StatusAccepted, "")
	accepted := r.json(t)["order_id"].(string)

	// Who may end, and which ids.
	expectErr(t, h.do("POST", end, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", end, h.buyer(1), nil), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("POST", "/api/v1/items/abc/end", h.admin, nil), http.StatusBadRequest, "BAD_REQUEST")
	expectErr(t, h.do("POST", "/api/v1/items/999999/end", h.admin, nil), http.StatusNotFound, "ITEM_NOT_FOUND")

	before := time.Now()
	req, _ := http.NewRequest("POST", h.ts.URL+end, nil)
	req.Header.Set("Authorization", "Bearer "+h.admin)
	req.Header.Set("Idempotency-Key", "end-once")
	res, err := h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("end: %d", res.StatusCode)
	}
	v := itemBody(t, h.do("GET", fmt.Sprintf("/api/v1/items/%d", item), "", nil))
	if v.Status != sale.ItemEnded || v.EndAt.After(time.Now()) || v.EndAt.Before(before.Add(-time.Second)) {
		t.Fatalf("after end: %+v", v)
	}
	// New purchases: exactly what a sale past its end_at answers.
	expectErr(t, h.do("POST", buy, h.buyer(2), nil), http.StatusForbidden, "SALE_ENDED")
	// The accepted order is untouched.
	if got, ok, _ := h.units.BuyerOrder(context.Background(), item, 1); !ok || got != accepted {
		t.Fatalf("the accepted order's mark is gone: %q %v", got, ok)
	}

	// Ending again: 409, end_at unchanged; the same Idempotency-Key: 200 again.
	expectErr(t, h.do("POST", end, h.admin, nil), http.StatusConflict, "SALE_ENDED")
	res, err = h.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("end retried with its Idempotency-Key: %d", res.StatusCode)
	}
	if again := itemBody(t, h.do("GET", fmt.Sprintf("/api/v1/items/%d", item), "", nil)); !again.EndAt.Equal(v.EndAt) {
		t.Fatalf("a repeated end moved end_at: %v -> %v", v.EndAt, again.EndAt)
	}

	// An upcoming sale ended reads ENDED, not UPCOMING.
	up := h.cached(h.item(3, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour)))
	r = h.do("POST", fmt.Sprintf("/api/v1/items/%d/end", up), h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.Status != sale.ItemEnded || !v.StartAt.Before(v.EndAt) {
		t.Fatalf("upcoming sale ended: %+v", v)
	}
}

// A second instance on the same fakes learns of the end from the
// announcement alone.
func TestUnitEndSaleReachesAnotherInstance(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(5))
	other := api.New(unitConfig(), api.Deps{
		Items: h.items, Stock: h.items, Orders: h.orders, Units: h.units, Views: h.views, Actions: h.actions,
		Tokens: auth.NewVerifier(testSecret), Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: testkit.Logger(t),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { other.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	buyOther := func(user int64) response {
		return serveRecorder(other, "POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(user))
	}
	// The other instance has the item cached and on sale, and listens for
	// item changes (each instance subscribes once Run has loaded the items).
	waitUntil(t, "the other instance sells", func() bool { return buyOther(10).status == http.StatusAccepted })
	waitUntil(t, "the other instance listens", func() bool {
		h.units.mu.Lock()
		defer h.units.mu.Unlock()
		return len(h.units.itemWatchers) == 2
	})
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/end", item), h.admin, nil), http.StatusOK, "")
	waitUntil(t, "the other instance answers SALE_ENDED", func() bool {
		r := buyOther(11)
		return r.status == http.StatusForbidden && r.errCode() == "SALE_ENDED"
	})
}

func TestUnitAddStock(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(1))
	add := fmt.Sprintf("/api/v1/items/%d/stock", item)
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	expect(t, h.do("POST", buy, h.buyer(1), nil), http.StatusAccepted, "")
	expectErr(t, h.do("POST", buy, h.buyer(2), nil), http.StatusGone, "SOLD_OUT")

	for _, bad := range []string{`{"add":0}`, `{"add":-1}`, `{"add":1000001}`, `{"add":"5"}`, `{"add":1.5}`, `{}`, `[]`, `x`, ``, `{"add":null}`} {
		expectErr(t, h.do("POST", add, h.admin, bad), http.StatusBadRequest, "BAD_REQUEST")
	}
	expectErr(t, h.do("POST", add, h.buyer(1), `{"add":1}`), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("POST", "/api/v1/items/999999/stock", h.admin, `{"add":1}`), http.StatusNotFound, "ITEM_NOT_FOUND")

	r := h.do("POST", add, h.admin, `{"add":3}`)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.StockTotal != 4 || v.StockLeft != 3 || v.Status != sale.ItemActive {
		t.Fatalf("after add: %+v", v)
	}
	// The sold-out flag is down: the next buyer gets a unit.
	expect(t, h.do("POST", buy, h.buyer(2), nil), http.StatusAccepted, "")

	// Redis refuses the add: 503, and neither side changed.
	h.units.mu.Lock()
	h.units.addErr = errDown
	h.units.mu.Unlock()
	expectErr(t, h.do("POST", add, h.admin, `{"add":5}`), http.StatusServiceUnavailable, "UNAVAILABLE")
	if it, _ := h.items.GetItem(context.Background(), item); it.StockTotal != 4 {
		t.Fatalf("a failed add changed stock_total to %d", it.StockTotal)
	}
	if n := h.units.unitsLeft(item); n != 2 {
		t.Fatalf("a failed add left %d units in Redis, want 2", n)
	}
	h.units.mu.Lock()
	h.units.addErr = nil
	h.units.mu.Unlock()

	// An ended sale: 409.
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/items/%d/end", item), h.admin, nil), http.StatusOK, "")
	expectErr(t, h.do("POST", add, h.admin, `{"add":1}`), http.StatusConflict, "SALE_ENDED")
}

// An add retried with its Idempotency-Key is applied once and answers the
// first add's result; the key with another N is 409.
func TestUnitAddStockIdempotencyKey(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(2))
	add := fmt.Sprintf("/api/v1/items/%d/stock", item)
	r := h.doKey("POST", add, h.admin, "add-1", `{"add":3}`)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.StockTotal != 5 || r.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first add: %+v %v", v, r.header)
	}
	expect(t, h.doKey("POST", add, h.admin, "add-2", `{"add":4}`), http.StatusOK, "")
	r = h.doKey("POST", add, h.admin, "add-1", `{"add":3}`)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.StockTotal != 5 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retried add: %+v (want the first result, stock_total 5), replayed %q", v, r.header.Get("Idempotent-Replayed"))
	}
	expectErr(t, h.doKey("POST", add, h.admin, "add-1", `{"add":7}`), http.StatusConflict, "IDEMPOTENCY_KEY_REUSED")
	if it, _ := h.items.GetItem(context.Background(), item); it.StockTotal != 9 {
		t.Fatalf("stock_total %d after adds of 3 (retried twice) and 4, want 9", it.StockTotal)
	}
	if n := h.units.unitsLeft(item); n != 9 {
		t.Fatalf("redis holds %d units, want 9", n)
	}
}

// The request told "503, retry with the same key" (its end committed, its
// announcement failed) gets its 200, even after another admin's end of the
// same sale was refused in between.
func TestUnitEndSaleRetryAfter503(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(5))
	end := fmt.Sprintf("/api/v1/items/%d/end", item)
	h.units.fail(errDown)
	expectErr(t, h.doKey("POST", end, h.admin, "end-a", nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	h.units.fail(nil)
	expectErr(t, h.doKey("POST", end, h.admin, "end-b", nil), http.StatusConflict, "SALE_ENDED")
	r := h.doKey("POST", end, h.admin, "end-a", nil)
	expect(t, r, http.StatusOK, "")
	if v := itemBody(t, r); v.Status != sale.ItemEnded {
		t.Fatalf("retried end: %+v", v)
	}
	expectErr(t, h.doKey("POST", end, h.admin, "end-b", nil), http.StatusConflict, "SALE_ENDED")
}

// A reload whose MySQL read was taken before another instance ended the sale
// and finishes after the end's own reload never puts the sale back on.
func TestUnitItemCacheNeverUndoesAnEnd(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.ItemRefresh = 20 * time.Millisecond })
	item := h.cached(h.onSale(5))
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	ctx := context.Background()

	read, release := make(chan store.Item, 1), make(chan struct{})
	h.items.mu.Lock()
	h.items.afterRead = func(it store.Item) {
		h.items.mu.Lock()
		h.items.afterRead = nil // hold the first read only
		h.items.mu.Unlock()
		read <- it
		<-release
	}
	h.items.mu.Unlock()
	slow := make(chan error, 1)
	go func() { slow <- h.srv.LoadItem(ctx, item) }()
	if before := <-read; !time.Now().Before(before.EndAt) {
		t.Fatalf("the held read already saw the end: %+v", before)
	}

	// Another instance ends the sale and announces it: this one reloads.
	if _, err := h.items.EndSale(ctx, item, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := h.units.AnnounceItem(ctx, item, false); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the end reaches the instance", func() bool {
		r := h.do("POST", buy, h.buyer(1), nil)
		return r.status == http.StatusForbidden && r.errCode() == "SALE_ENDED"
	})

	close(release) // the read taken before the end lands now
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
	expectErr(t, h.do("POST", buy, h.buyer(2), nil), http.StatusForbidden, "SALE_ENDED")
	// Nor after refreshes (the entry's revision is the end's).
	pulses := func() int { h.units.mu.Lock(); defer h.units.mu.Unlock(); return h.units.pulses }
	seen := pulses()
	waitUntil(t, "three refreshes", func() bool { return pulses() >= seen+3 })
	expectErr(t, h.do("POST", buy, h.buyer(3), nil), http.StatusForbidden, "SALE_ENDED")
}

func TestUnitAdminLimiter(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) {
		c.BuyerRPS, c.BuyerBurst = 5, 10
		def := testkit.Config(t).API
		c.AdminRPS, c.AdminBurst = def.AdminRPS, def.AdminBurst
	})
	// A setup script: a hundred sales back to back, on the defaults.
	for i := range 100 {
		r := h.do("POST", "/api/v1/items", h.admin, map[string]any{
			"name": fmt.Sprintf("sale %d", i), "price_cents": 100, "stock_total": 10,
			"start_at": time.Now().Add(time.Hour).Format(time.RFC3339), "end_at": time.Now().Add(2 * time.Hour).Format(time.RFC3339),
		})
		expect(t, r, http.StatusCreated, "")
	}
	// The admin limiter still limits, with Retry-After.
	tight := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.AdminRPS, c.AdminBurst = 0.01, 2 })
	for range 2 {
		expect(t, tight.do("GET", "/api/v1/orders/01M8S1QSJHTDVBQCRVA24WV9Z0", tight.admin, nil), http.StatusNotFound, "")
	}
	r := tight.do("POST", "/api/v1/items/1/end", tight.admin, nil)
	expectErr(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("429 without Retry-After")
	}
	// Buyers are not charged to it.
	expectErr(t, tight.do("GET", "/api/v1/orders/01M8S1QSJHTDVBQCRVA24WV9Z0", tight.buyer(1), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
}

func TestUnitListItems(t *testing.T) {
	h := newUnitHarness(t)
	now := time.Now()
	active := h.cached(h.onSale(5))
	upcoming := h.cached(h.item(5, now.Add(time.Hour), now.Add(2*time.Hour)))
	recent := h.cached(h.item(5, now.Add(-time.Hour), now.Add(-time.Minute)))
	old := h.cached(h.item(5, now.Add(-3*time.Hour), now.Add(-2*time.Hour)))
	sold := h.cached(h.onSale(1))
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", sold), h.buyer(1), nil), http.StatusAccepted, "")

	list := func(query string) map[int64]string {
		t.Helper()
		r := h.do("GET", "/api/v1/items"+query, "", nil)
		expect(t, r, http.StatusOK, "")
		var body struct {
			Items []sale.ItemView `json:"items"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		out := map[int64]string{}
		for _, v := range body.Items {
			out[v.ID] = v.Status
		}
		return out
	}
	all := list("")
	want := map[int64]string{active: sale.ItemActive, upcoming: sale.ItemUpcoming, recent: sale.ItemEnded, sold: sale.ItemSoldOut}
	for id, st := range want {
		if all[id] != st {
			t.Fatalf("item %d: %q, want %q (list %v)", id, all[id], st, all)
		}
	}
	if _, ok := all[old]; ok {
		t.Fatalf("a sale ended two hours ago is listed: %v", all)
	}
	if got := list("?status=ACTIVE"); len(got) != 1 || got[active] != sale.ItemActive {
		t.Fatalf("?status=ACTIVE: %v", got)
	}
	if got := list("?status=upcoming,sold_out"); len(got) != 2 || got[upcoming] == "" || got[sold] == "" {
		t.Fatalf("?status=upcoming,sold_out: %v", got)
	}
	for _, bad := range []string{"?status=", "?status=BOGUS", "?status=ACTIVE,x"} {
		expectErr(t, h.do("GET", "/api/v1/items"+bad, "", nil), http.StatusBadRequest, "BAD_REQUEST")
	}
}

func TestUnitListOrders(t *testing.T) {
	h := newUnitHarness(t)
	const buyer, other = 7, 8
	// Three persisted orders of the buyer, one of another buyer, and one
	// the buyer holds only in Redis (QUEUED).
	var persisted []string
	for range 3 {
		item := h.cached(h.onSale(5))
		v := h.pendingOrder(item, buyer, time.Hour)
		persisted = append(persisted, v.OrderID)
		time.Sleep(2 * time.Millisecond) // distinct ULID milliseconds
	}
	h.pendingOrder(h.cached(h.onSale(5)), other, time.Hour)
	queuedItem := h.cached(h.onSale(5))
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", queuedItem), h.buyer(buyer), nil)
	expect(t, r, http.StatusAccepted, "")
	queued := r.json(t)["order_id"].(string)

	page := func(token, query string) ([]order.View, *string) {
		t.Helper()
		r := h.do("GET", "/api/v1/orders"+query, token, nil)
		expect(t, r, http.StatusOK, "")
		var body struct {
			Orders     []order.View `json:"orders"`
			NextCursor *string      `json:"next_cursor"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(r.body), `"next_cursor"`) {
			t.Fatalf("no next_cursor field: %s", r.body)
		}
		return body.Orders, body.NextCursor
	}
	all, next := page(h.buyer(buyer), "")
	if next != nil || len(all) != 4 {
		t.Fatalf("all orders: %d, next %v", len(all), next)
	}
	want := []string{queued, persisted[2], persisted[1], persisted[0]}
	for i, v := range all {
		if v.OrderID != want[i] || v.UserID != buyer {
			t.Fatalf("order %d: %+v, want %s", i, v, want[i])
		}
	}
	if all[0].Status != order.StatusQueued || all[1].Status != order.StatusPendingPayment || all[1].PayBy == nil {
		t.Fatalf("views: %+v", all[:2])
	}
	// Pages of two, then one... the same four in the same order.
	var got []string
	cursor := ""
	for {
		q := "?limit=2"
		if cursor != "" {
			q += "&cursor=" + cursor
		}
		vs, next := page(h.buyer(buyer), q)
		for _, v := range vs {
			got = append(got, v.OrderID)
		}
		if next == nil {
			break
		}
		cursor = *next
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("paged %v, want %v", got, want)
	}
	// Another buyer sees only their own; an admin token is not a buyer.
	if vs, _ := page(h.buyer(other), ""); len(vs) != 1 || vs[0].UserID != other {
		t.Fatalf("other buyer: %+v", vs)
	}
	if vs, _ := page(h.buyer(999), ""); len(vs) != 0 {
		t.Fatalf("a buyer without orders: %+v", vs)
	}
	expectErr(t, h.do("GET", "/api/v1/orders", h.admin, nil), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("GET", "/api/v1/orders", "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	for _, bad := range []string{"?limit=0", "?limit=101", "?limit=x", "?limit=", "?cursor=nope", "?cursor="} {
		expectErr(t, h.do("GET", "/api/v1/orders"+bad, h.buyer(buyer), nil), http.StatusBadRequest, "BAD_REQUEST")
	}
	// MySQL down: 503.
	h.orders.mu.Lock()
	h.orders.err = errDown
	h.orders.mu.Unlock()
	expectErr(t, h.do("GET", "/api/v1/orders", h.buyer(buyer), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

// A buyer who holds a unit of a sold-out item gets 409 with the order from
// any instance, never 410; other buyers get 410 without Redis once the
// item's marks are loaded.
func TestUnitSoldOutAnswersTheHolder(t *testing.T) {
	h := newUnitHarness(t)
	item := h.cached(h.onSale(1))
	buy := fmt.Sprintf("/api/v1/seckill/%d", item)
	r := h.do("POST", buy, h.buyer(1), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	expectErr(t, h.do("POST", buy, h.buyer(2), nil), http.StatusGone, "SOLD_OUT")
	r = h.do("POST", buy, h.buyer(1), nil)
	expectErr(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	if !strings.Contains(string(r.body), id) {
		t.Fatalf("409 without the order: %s", r.body)
	}
	// With the marks loaded, a non-holder costs no Redis call: Redis down
	// changes nothing for them, while the holder cannot be told (503).
	waitUntil(t, "the marks are loaded", func() bool {
		h.units.fail(errDown)
		r := h.do("POST", buy, h.buyer(3), nil)
		h.units.fail(nil)
		return r.status == http.StatusGone
	})
}

var _ = store.Item{}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// serveRecorder runs one request through a server's handler in memory.
func serveRecorder(srv *api.Server, method, path, token string) response {
	req := httptest.NewRequest(method, path, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	srv.Engine().ServeHTTP(rec, req)
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// Every open storefront polls GET /api/v1/items each second: the list serves
// stock_left as this instance last read it and reads Redis again at most once
// a second, whatever the number of pollers, while a sale made elsewhere still
// shows within about a second.
func TestUnitListItemsReadsRedisAtMostOnceASecond(t *testing.T) {
	h := newUnitHarness(t) // ItemRefresh is an hour: the periodic refresh stays out of it
	item := h.cached(h.onSale(10))
	reads := func() int {
		h.units.mu.Lock()
		defer h.units.mu.Unlock()
		return h.units.leftManys
	}
	list := func() (int64, error) {
		res, err := h.ts.Client().Get(h.ts.URL + "/api/v1/items")
		if err != nil {
			return 0, err
		}
		defer res.Body.Close()
		var body struct {
			Items []sale.ItemView `json:"items"`
		}
		if err := json.NewDecoder(res.Body).Decode(&body); err != nil || res.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("status %d: %v", res.StatusCode, err)
		}
		for _, v := range body.Items {
			if v.ID == item {
				return v.StockLeft, nil
			}
		}
		return 0, fmt.Errorf("item %d not listed", item)
	}

	before, start := reads(), time.Now()
	var (
		mu    sync.Mutex
		calls int
		sold  time.Time // when another instance's buyer took a unit
		seen  time.Time // when the list first showed it
	)
	stop := start.Add(2500 * time.Millisecond)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 { // eight storefronts polling as fast as they can
		wg.Go(func() {
			for time.Now().Before(stop) {
				left, err := list()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				calls++
				if left == 9 && seen.IsZero() {
					seen = time.Now()
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond) // the pollers are under way
	if _, err := h.units.Twin.Reserve(context.Background(), order.Message{OrderID: order.NewID(), ItemID: item, UserID: 77}); err != nil {
		t.Fatal(err) // a sale through another instance
	}
	mu.Lock()
	sold = time.Now()
	mu.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	n, most := reads()-before, 1+int(elapsed/time.Second)
	t.Logf("%d list calls in %s: %d Redis reads; the sale shown after %s", calls, elapsed.Round(time.Millisecond), n, seen.Sub(sold).Round(time.Millisecond))
	if calls < 20 {
		t.Fatalf("only %d list calls: the test proves nothing", calls)
	}
	if n > most {
		t.Fatalf("%d list calls in %s read stock_left from Redis %d times, want at most %d", calls, elapsed, n, most)
	}
	if seen.IsZero() || seen.Sub(sold) > 1500*time.Millisecond {
		t.Fatalf("the sale at %s shown at %s: want within about a second", sold.Format("15:04:05.000"), seen.Format("15:04:05.000"))
	}
}
