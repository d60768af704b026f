package api_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// The HTTP contract of every route on in-memory dependencies: these run
// under -short with nothing listening. contract_test.go checks the same
// answers on the real Redis and MySQL.

// expectErr checks an error answer: status, code, the JSON error shape and
// its Content-Type.
func TestUnitNewRequiresDeps(t *testing.T) {
	views := newFakeViews()
	full := func() api.Deps {
		items := newFakeItems()
		return api.Deps{Items: items, Stock: items, Orders: newFakeOrders(), Units: newFakeUnits(views), Views: views,
			Tokens: auth.NewVerifier(testSecret), Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler)}
	}
	for name, drop := range map[string]func(*api.Deps){
		"Items": func(d *api.Deps) { d.Items = nil }, "Orders": func(d *api.Deps) { d.Orders = nil },
		"Units": func(d *api.Deps) { d.Units = nil }, "Views": func(d *api.Deps) { d.Views = nil },
		"Tokens": func(d *api.Deps) { d.Tokens = nil }, "Metrics": func(d *api.Deps) { d.Metrics = nil },
		"Log": func(d *api.Deps) { d.Log = nil }, "Stock": func(d *api.Deps) { d.Stock = nil },
	} {
		d := full()
		drop(&d)
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Deps."+name) {
					t.Fatalf("New without %s: panic %v", name, r)
				}
			}()
			api.New(unitConfig(), d)
		}()
	}
	// Actions, Relay and Checks are optional.
	if api.New(unitConfig(), full()) == nil {
		t.Fatal("New returned nil")
	}
}

func TestUnitCreateItem(t *testing.T) {
	h := newUnitHarness(t)
	start, end := time.Now().Add(time.Hour).UTC().Format(time.RFC3339), time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339)
	valid := map[string]any{"name": "phone", "price_cents": 199900, "stock_total": 3, "start_at": start, "end_at": end}

	expectErr(t, h.do("POST", "/api/v1/items", "", valid), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", "/api/v1/items", "not-a-token", valid), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", "/api/v1/items", h.buyer(5), valid), http.StatusForbidden, "FORBIDDEN")
	for _, body := range []string{"{", "", "[1,2]", `"x"`} {
		expectErr(t, h.do("POST", "/api/v1/items", h.admin, body), http.StatusBadRequest, "BAD_REQUEST")
	}
	r := h.do("POST", "/api/v1/items", h.admin, map[string]any{"name": "", "price_cents": -5, "stock_total": 0,
		"start_at": "x", "end_at": "y", "payment_timeout_seconds": 1, "currency": "eur"})
	expectErr(t, r, http.StatusBadRequest, "BAD_REQUEST")
	msg := r.json(t)["error"].(map[string]any)["message"].(string)
	for _, f := range []string{"name", "price_cents", "stock_total", "start_at", "end_at", "payment_timeout_seconds", "currency"} {
		if !strings.Contains(msg, f+":") {
			t.Fatalf("message %q does not name %s", msg, f)
		}
	}
	if n := len(h.items.byID); n != 0 {
		t.Fatalf("%d items stored by refused requests", n)
	}

	it := createdItem(t, h.do("POST", "/api/v1/items", h.admin, valid))
	if it.ID <= 0 || it.Name != "phone" || it.PriceCents != 199900 || it.StockTotal != 3 || it.StockLeft != 3 ||
		it.Status != sale.ItemUpcoming || it.PaymentTimeoutSeconds != 900 || it.StartAt.Format(time.RFC3339) != start {
		t.Fatalf("created item %+v", it)
	}
	if left := h.units.unitsLeft(it.ID); left != 3 {
		t.Fatalf("stock loaded %d, want 3", left)
	}
	// "stock" is an alias of stock_total.
	r = h.do("POST", "/api/v1/items", h.admin, map[string]any{"name": "x", "price_cents": 0, "stock": 2,
		"start_at": start, "end_at": end, "payment_timeout_seconds": 60})
	expect(t, r, http.StatusCreated, "")
	if m := r.json(t); m["stock_total"].(float64) != 2 || m["payment_timeout_seconds"].(float64) != 60 || m["currency"] != "EUR" {
		t.Fatalf("alias create %s", r.body)
	}
	// A currency of its own.
	r = h.do("POST", "/api/v1/items", h.admin, map[string]any{"name": "y", "price_cents": 500, "stock": 1,
		"start_at": start, "end_at": end, "currency": "USD"})
	if expect(t, r, http.StatusCreated, ""); r.json(t)["currency"] != "USD" {
		t.Fatalf("create with a currency %s", r.body)
	}

	// Stock not loadable: 503 naming the warmup; the item exists.
	h.units.fail(errDown)
	r = h.do("POST", "/api/v1/items", h.admin, valid)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	if !strings.Contains(r.json(t)["error"].(map[string]any)["message"].(string), "/warmup") {
		t.Fatalf("503 does not name the warmup: %s", r.body)
	}
	h.units.fail(nil)
	// MySQL down: 503.
	h.items.fail(errDown)
	expectErr(t, h.do("POST", "/api/v1/items", h.admin, valid), http.StatusServiceUnavailable, "UNAVAILABLE")
	h.items.fail(nil)
	// Body over the limit: 413.
	big := `{"name":"` + strings.Repeat("a", 70<<10) + `"}`
	expectErr(t, h.do("POST", "/api/v1/items", h.admin, big), http.StatusRequestEntityTooLarge, "PAYLOAD_TOO_LARGE")
}

func TestUnitGetItem(t *testing.T) {
	h := newUnitHarness(t)
	id := h.onSale(2)
	r := h.do("GET", fmt.Sprintf("/api/v1/items/%d", id), "", nil)
	expect(t, r, http.StatusOK, "")
	if m := r.json(t); m["status"] != sale.ItemActive || m["stock_left"].(float64) != 2 || m["id"].(float64) != float64(id) {
		t.Fatalf("item %s", r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	expectErr(t, h.do("GET", "/api/v1/items/999999", "", nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	for _, bad := range []string{"abc", "-1", "0", "99999999999999999999", "1.5"} {
		expectErr(t, h.do("GET", "/api/v1/items/"+bad, "", nil), http.StatusBadRequest, "BAD_REQUEST")
	}
	// A missing id is remembered: the second miss does not reach MySQL.
	gets := h.items.gets
	expectErr(t, h.do("GET", "/api/v1/items/999999", "", nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	if h.items.gets != gets {
		t.Fatal("a remembered miss read MySQL again")
	}

	status := func(id int64) any { return h.do("GET", fmt.Sprintf("/api/v1/items/%d", id), "", nil).json(t)["status"] }
	if s := status(h.item(1, time.Now().Add(time.Hour), time.Now().Add(2*time.Hour))); s != sale.ItemUpcoming {
		t.Fatalf("status %v, want UPCOMING", s)
	}
	if s := status(h.item(1, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))); s != sale.ItemEnded {
		t.Fatalf("status %v, want ENDED", s)
	}
	sold := h.onSale(1)
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", sold), h.buyer(9), nil), http.StatusAccepted, "")
	if s := status(sold); s != sale.ItemSoldOut {
		t.Fatalf("status %v, want SOLD_OUT", s)
	}

	// Redis cannot answer: the last figure read is served.
	h.units.fail(errDown)
	r = h.do("GET", fmt.Sprintf("/api/v1/items/%d", id), "", nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["stock_left"].(float64) != 2 {
		t.Fatalf("fallback stock_left %s", r.body)
	}
	h.units.fail(nil)
	// Not warmed up yet: nothing reserved, stock_left is the total.
	it, _ := h.items.CreateItem(context.Background(), store.Item{Name: "cold", StockTotal: 7,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour)})
	if r := h.do("GET", fmt.Sprintf("/api/v1/items/%d", it.ID), "", nil); r.json(t)["stock_left"].(float64) != 7 {
		t.Fatalf("cold item %s", r.body)
	}
	// MySQL down for an item not cached: 503.
	h.items.fail(errDown)
	expectErr(t, h.do("GET", "/api/v1/items/5555", "", nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

func TestUnitWarmup(t *testing.T) {
	h := newUnitHarness(t)
	id := h.onSale(2)
	path := fmt.Sprintf("/api/v1/items/%d/warmup", id)
	expectErr(t, h.do("POST", path, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", path, h.buyer(3), nil), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("POST", "/api/v1/items/x/warmup", h.admin, nil), http.StatusBadRequest, "BAD_REQUEST")
	expectErr(t, h.do("POST", "/api/v1/items/424242/warmup", h.admin, nil), http.StatusNotFound, "ITEM_NOT_FOUND")

	// Live stock is never overwritten.
	expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", id), h.buyer(9), nil), http.StatusAccepted, "")
	r := h.do("POST", path, h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["stock_left"].(float64) != 1 || h.units.unitsLeft(id) != 1 {
		t.Fatalf("warmup overwrote live stock: %s", r.body)
	}
	// Stock missing from Redis is loaded from the stock row, less buyer 9's
	// live reservation (count.lua): 2 would sell that unit twice.
	h.units.LoseStock(id)
	r = h.do("POST", path, h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["stock_left"].(float64) != 1 || h.units.unitsLeft(id) != 1 {
		t.Fatalf("warmup did not load: %s", r.body)
	}
	h.units.fail(errDown)
	expectErr(t, h.do("POST", path, h.admin, nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

func TestUnitPurchase(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(2)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)

	h.checkPurchaseRefused(t, path, h.item)
	if h.units.reserves != 0 {
		t.Fatalf("%d reservations attempted by refused requests", h.units.reserves)
	}

	orderID := accepted(t, h.do("POST", path, h.buyer(1), nil))
	if v, ok, _ := h.views.Status(context.Background(), orderID); !ok || v.Status != order.StatusQueued || v.UserID != 1 || v.ItemID != item {
		t.Fatalf("QUEUED view %+v %v", v, ok)
	}

	r := h.do("POST", path, h.buyer(1), nil)
	expectErr(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	if got := r.json(t)["error"].(map[string]any)["order_id"]; got != orderID {
		t.Fatalf("ALREADY_PURCHASED order_id %v, want %s", got, orderID)
	}
	expect(t, h.do("POST", path, h.buyer(2), nil), http.StatusAccepted, "")
	expectErr(t, h.do("POST", path, h.buyer(3), nil), http.StatusGone, "SOLD_OUT")
	reserves := h.units.reserves
	expectErr(t, h.do("POST", path, h.buyer(4), nil), http.StatusGone, "SOLD_OUT")
	if h.units.reserves != reserves {
		t.Fatal("sold out in memory, yet Redis was asked")
	}
	if left := h.units.unitsLeft(item); left != 0 {
		t.Fatalf("left %d", left)
	}
	// A unit given back clears the flag; the next buyer gets it.
	h.units.release(item)
	expect(t, h.do("POST", path, h.buyer(5), nil), http.StatusAccepted, "")
}

func TestUnitPurchaseDependencyFailures(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(5)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)

	// Stock not in Redis: 503, nothing reserved.
	h.units.LoseStock(item)
	expectErr(t, h.do("POST", path, h.buyer(1), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	_, _ = h.units.Load(context.Background(), item, 5)

	// Redis down: 503 and nothing reserved.
	h.units.reserveErr = errDown
	expectErr(t, h.do("POST", path, h.buyer(1), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	if h.units.unitsLeft(item) != 5 {
		t.Fatal("a unit was taken by a failed reservation")
	}
	// Any other Redis failure (an error reply such as READONLY during a
	// failover, OOM) that reserved nothing is 503 too, not 500: the buyer
	// may retry (regression: it was 500 INTERNAL).
	h.units.reserveErr = errors.New("READONLY You can't write against a read only replica.")
	expectErr(t, h.do("POST", path, h.buyer(1), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	h.units.reserveErr = nil

	// Redis failed after the script ran: the unit is the buyer's, 202 with
	// this attempt's order id, and the QUEUED status is stored.
	h.units.failAfter = errDown
	r := h.do("POST", path, h.buyer(2), nil)
	h.units.failAfter = nil
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	if got, _, _ := h.units.BuyerOrder(context.Background(), item, 2); got != id {
		t.Fatalf("202 order %s, buyer's mark %s", id, got)
	}
	if v, ok, _ := h.views.Status(context.Background(), id); !ok || v.Status != order.StatusQueued {
		t.Fatalf("QUEUED view %+v %v", v, ok)
	}
	// MySQL down for an item this instance has not seen: 503.
	h.items.fail(errDown)
	expectErr(t, h.do("POST", "/api/v1/seckill/31337", h.buyer(3), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

// A reservation that failed with its outcome unknown while Redis fails
// over: the purchase keeps asking for the buyer's mark until the promoted
// master answers, and tells the buyer the truth (regression: the cluster
// profile's kill -9 of a Redis master answered 503 "nothing was reserved"
// to buyers whose units had been taken and replicated).
func TestUnitPurchaseOutcomeUnknownDuringFailover(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.ConfirmTimeout = time.Minute })
	item := h.onSale(3)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)

	// The script ran, its reply was lost, and the mark is unreadable for
	// three reads: 202 with this attempt's order, not 503.
	h.units.failAfter, h.units.markFails = errDown, 3
	r := h.do("POST", path, h.buyer(1), nil)
	expect(t, r, http.StatusAccepted, "")
	id := r.json(t)["order_id"].(string)
	if got, _, _ := h.units.BuyerOrder(context.Background(), item, 1); got != id {
		t.Fatalf("202 order %s, buyer's mark %s", id, got)
	}
	if h.units.markFails != 0 {
		t.Fatalf("answered before the mark could be read (%d failures left)", h.units.markFails)
	}

	// Nothing ran, the mark unreadable at first: 503 "nothing was
	// reserved" once the mark is read, and no unit is gone.
	h.units.failAfter, h.units.reserveErr, h.units.markFails = nil, errDown, 2
	r = h.do("POST", path, h.buyer(2), nil)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	if !strings.Contains(string(r.body), "nothing was reserved") || h.units.unitsLeft(item) != 2 {
		t.Fatalf("body %s, left %d", r.body, h.units.unitsLeft(item))
	}
	h.units.reserveErr = nil
}

// Redis never answers within the confirm window: 503 saying the outcome is
// not known, and the buyer's retry on this instance reaches Redis although
// the item looks sold out here, so it learns its order (409).
func TestUnitPurchaseOutcomeUnknownRetryLearnsTheOrder(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.ConfirmTimeout = 200 * time.Millisecond })
	item := h.onSale(1)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)

	h.units.failAfter, h.units.markFails = errDown, -1
	r := h.do("POST", path, h.buyer(1), nil)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	if !strings.Contains(string(r.body), "not known") {
		t.Fatalf("503 does not say the outcome is unknown: %s", r.body)
	}
	h.units.failAfter, h.units.markFails = nil, 0
	mark, _, _ := h.units.BuyerOrder(context.Background(), item, 1)

	// Another buyer sells the item out in this instance's memory.
	expectErr(t, h.do("POST", path, h.buyer(2), nil), http.StatusGone, "SOLD_OUT")
	reserves := h.units.reserves
	expectErr(t, h.do("POST", path, h.buyer(3), nil), http.StatusGone, "SOLD_OUT")
	if h.units.reserves != reserves {
		t.Fatal("sold out in memory, yet Redis was asked for a buyer with nothing unknown")
	}
	// The unsure buyer goes to Redis: 409 naming the order its first attempt made.
	r = h.do("POST", path, h.buyer(1), nil)
	expectErr(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	if !strings.Contains(string(r.body), mark) {
		t.Fatalf("409 does not name order %s: %s", mark, r.body)
	}
	// Answered once: its next attempt meets the sold-out flag like anyone's,
	// and the flag's answer checks the buyer's mark: 409 again, never 410,
	// and no reservation is tried.
	reserves = h.units.reserves
	r = h.do("POST", path, h.buyer(1), nil)
	expectErr(t, r, http.StatusConflict, "ALREADY_PURCHASED")
	if !strings.Contains(string(r.body), mark) {
		t.Fatalf("409 does not name order %s: %s", mark, r.body)
	}
	if h.units.reserves != reserves {
		t.Fatal("the buyer was still treated as unsure after Redis answered")
	}
}

// Many buyers at once on the fakes: never more 202s than units, one per
// buyer, the rest SOLD_OUT or ALREADY_PURCHASED.
func TestUnitPurchaseStampede(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(10)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)
	tokens := make([]string, 40)
	for i := range tokens {
		tokens[i] = h.buyer(int64(i%20 + 1)) // each buyer twice
	}
	codes := make([]int, len(tokens))
	var wg sync.WaitGroup
	for i, tok := range tokens {
		wg.Go(func() {
			req, _ := http.NewRequest("POST", h.ts.URL+path, nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			res, err := h.ts.Client().Do(req)
			if err != nil {
				return
			}
			_ = res.Body.Close()
			codes[i] = res.StatusCode
		})
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[http.StatusAccepted] != 10 || count[http.StatusAccepted]+count[http.StatusGone]+count[http.StatusConflict] != len(tokens) {
		t.Fatalf("answers %v, want 10 × 202 and the rest 410 or 409", count)
	}
	if st, _ := h.units.ReadItemState(context.Background(), item); st.Left != 0 || len(st.Marks) != 10 {
		t.Fatalf("left %d, buyers %d", st.Left, len(st.Marks))
	}
}

func TestUnitRateLimits(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) {
		c.BuyerRPS, c.BuyerBurst = 0.5, 2
		c.IPRPS, c.IPBurst = 1, 2
	})
	item := h.onSale(100)
	path := fmt.Sprintf("/api/v1/seckill/%d", item)
	expect(t, h.do("POST", path, h.buyer(1), nil), http.StatusAccepted, "")
	expectErr(t, h.do("POST", path, h.buyer(1), nil), http.StatusConflict, "ALREADY_PURCHASED")
	r := h.do("POST", path, h.buyer(1), nil)
	expectErr(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	retryAfter(t, r, 1, 2)
	// Every authenticated route is charged to the same bucket.
	expectErr(t, h.do("GET", "/api/v1/orders/"+order.NewID(), h.buyer(1), nil), http.StatusTooManyRequests, "RATE_LIMITED")
	expect(t, h.do("POST", path, h.buyer(2), nil), http.StatusAccepted, "") // another buyer is not affected

	// Anonymous traffic is charged to its IP, failed auth included.
	get := fmt.Sprintf("/api/v1/items/%d", item)
	expect(t, h.do("GET", get, "", nil), http.StatusOK, "")
	expectErr(t, h.do("POST", path, "bad", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	r = h.do("GET", get, "", nil)
	expectErr(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	retryAfter(t, r, 1, 2)
	expectErr(t, h.do("POST", path, "bad", nil), http.StatusTooManyRequests, "RATE_LIMITED")

	g := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.GlobalRPS, c.GlobalBurst = 0.1, 1 })
	item = g.onSale(100)
	path = fmt.Sprintf("/api/v1/seckill/%d", item)
	expect(t, g.do("POST", path, g.buyer(1), nil), http.StatusAccepted, "")
	r = g.do("POST", path, g.buyer(2), nil)
	expectErr(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	retryAfter(t, r, 1, 10)
}

func TestUnitGetOrder(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(5)
	r := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(11), nil)
	id := r.json(t)["order_id"].(string)

	h.checkOrderAccess(t, id, item)

	// No view in Redis: the row answers.
	now := time.Now().UTC()
	dbID := order.NewID()
	h.orders.put(store.Order{OrderID: dbID, UserID: 13, ItemID: item, Status: order.StatusPaid, CreatedAt: now, UpdatedAt: now})
	h.checkPaidRow(t, dbID)
	// A REFUNDED row says its refund: id, amount, currency and when.
	refID := order.NewID()
	h.orders.put(store.Order{OrderID: refID, UserID: 13, ItemID: item, Status: order.StatusRefunded, Reason: order.ReasonSupportRefund})
	h.orders.mu.Lock()
	h.orders.refunds = map[string][]store.Refund{refID: {{ProviderRefundID: "re_1", Amount: 999, Currency: "EUR",
		Status: store.RefundSucceeded, UpdatedAt: now}}}
	h.orders.mu.Unlock()
	if v := h.do("GET", "/api/v1/orders/"+refID, h.buyer(13), nil).json(t); v["refund_id"] != "re_1" || v["refund_amount"] != 999.0 ||
		v["refund_currency"] != "EUR" || v["refunded_at"] != now.Format(time.RFC3339Nano) {
		t.Fatalf("refunded order %v", v)
	}
	// A view stuck in QUEUED past staleAfter defers to the row.
	stuck := order.View{OrderID: dbID, UserID: 13, ItemID: item, Status: order.StatusQueued, UpdatedAt: now.Add(-time.Minute)}
	h.views.publish(stuck)
	if s := h.do("GET", "/api/v1/orders/"+dbID, h.buyer(13), nil).json(t)["status"]; s != "PAID" {
		t.Fatalf("stale view won: %v", s)
	}
	// Redis down and MySQL has the row: the row answers; neither: 503.
	h.views.err = errDown
	expect(t, h.do("GET", "/api/v1/orders/"+dbID, h.buyer(13), nil), http.StatusOK, "")
	expectErr(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(11), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	h.views.err = nil
	h.orders.err = errDown
	expect(t, h.do("GET", "/api/v1/orders/"+id, h.buyer(11), nil), http.StatusOK, "") // the fresh view suffices
	expectErr(t, h.do("GET", "/api/v1/orders/"+order.NewID(), h.buyer(11), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

func TestUnitEvents(t *testing.T) {
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps) { c.StreamsPerBuyer = 1 })
	item := h.onSale(5)
	id := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(21), nil).json(t)["order_id"].(string)
	path := "/api/v1/orders/" + id + "/events"

	expectErr(t, h.do("GET", path, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("GET", path, h.buyer(22), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expectErr(t, h.do("GET", "/api/v1/orders/nope/events", h.buyer(21), nil), http.StatusNotFound, "ORDER_NOT_FOUND")

	next := sse(t, h.openEvents(t, id, h.buyer(21)))
	first, _ := next()
	if first.Status != order.StatusQueued || first.OrderID != id || first.UserID != 21 {
		t.Fatalf("first event %+v", first)
	}
	// The buyer's one stream is open: a second is refused.
	r := h.do("GET", path, h.buyer(21), nil)
	expectErr(t, r, http.StatusTooManyRequests, "RATE_LIMITED")
	retryAfter(t, r, 1, 10)
	streamToPaid(t, next, first, h.views.publish)
	// The slot is released with the stream.
	deadline := time.Now().Add(2 * time.Second)
	for {
		res := h.openEvents(t, id, h.buyer(21))
		if res.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stream slot not released: %d", res.StatusCode)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestUnitPayAndCancel(t *testing.T) {
	h := newUnitHarness(t)
	item := h.onSale(5)
	v := h.pendingOrder(item, 31, time.Minute)
	pay, cancel := "/api/v1/orders/"+v.OrderID+"/pay", "/api/v1/orders/"+v.OrderID+"/cancel"

	expectErr(t, h.do("POST", pay, "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("POST", pay, h.buyer(32), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expectErr(t, h.do("POST", "/api/v1/orders/not-an-id/pay", h.buyer(31), nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expectErr(t, h.do("GET", pay, h.buyer(31), nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")

	r := h.do("POST", pay, h.buyer(31), nil)
	expect(t, r, http.StatusOK, "")
	if m := r.json(t); m["status"] != "PAID" || m["order_id"] != v.OrderID {
		t.Fatalf("pay %s", r.body)
	}
	expect(t, h.do("POST", pay, h.buyer(31), nil), http.StatusOK, "") // paying twice returns the order
	expectErr(t, h.do("POST", cancel, h.buyer(31), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")

	c := h.pendingOrder(item, 33, time.Minute)
	r = h.do("POST", "/api/v1/orders/"+c.OrderID+"/cancel", h.buyer(33), nil)
	expect(t, r, http.StatusOK, "")
	if m := r.json(t); m["status"] != "CANCELLED" || m["reason"] != order.ReasonBuyerCancelled {
		t.Fatalf("cancel %s", r.body)
	}
	expectErr(t, h.do("POST", "/api/v1/orders/"+c.OrderID+"/pay", h.buyer(33), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")

	late := h.pendingOrder(item, 34, -time.Second)
	expectErr(t, h.do("POST", "/api/v1/orders/"+late.OrderID+"/pay", h.buyer(34), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")

	// QUEUED (no row yet): the holder gets 409, anyone else 404.
	q := h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", item), h.buyer(35), nil).json(t)["order_id"].(string)
	expectErr(t, h.do("POST", "/api/v1/orders/"+q+"/pay", h.buyer(35), nil), http.StatusConflict, "ORDER_NOT_PAYABLE")
	expectErr(t, h.do("POST", "/api/v1/orders/"+q+"/pay", h.buyer(36), nil), http.StatusNotFound, "ORDER_NOT_FOUND")

	// The desk's database down: 503.
	p := h.pendingOrder(item, 37, time.Minute)
	h.actions.err = errDown
	expectErr(t, h.do("POST", "/api/v1/orders/"+p.OrderID+"/cancel", h.buyer(37), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	h.actions.err = nil

	// No payment desk wired: 503.
	n := newUnitHarness(t, func(_ *config.API, d *api.Deps) { d.Actions = nil })
	o := n.pendingOrder(n.onSale(1), 38, time.Minute)
	expectErr(t, n.do("POST", "/api/v1/orders/"+o.OrderID+"/pay", n.buyer(38), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
	expectErr(t, n.do("POST", "/api/v1/orders/"+o.OrderID+"/cancel", n.buyer(38), nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}

// An admin whose id equals the buyer's is not the buyer: pay and cancel are
// the owning buyer's only (regression: the desk was asked with the admin's
// id, which matched the buyer's row).
func TestUnitAdminCannotActForBuyerWithSameID(t *testing.T) {
	h := newUnitHarness(t)
	v := h.pendingOrder(h.onSale(1), 40, time.Minute)
	admin40 := h.token(40, auth.RoleAdmin)
	expectErr(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", admin40, nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	expectErr(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/cancel", admin40, nil), http.StatusNotFound, "ORDER_NOT_FOUND")
	if o, _ := h.orders.FindOrder(context.Background(), v.OrderID); o.Status != order.StatusPendingPayment {
		t.Fatalf("the admin changed the buyer's order: %+v", o)
	}
	expect(t, h.do("GET", "/api/v1/orders/"+v.OrderID, admin40, nil), http.StatusOK, "") // admins may look
	expect(t, h.do("POST", "/api/v1/orders/"+v.OrderID+"/pay", h.buyer(40), nil), http.StatusOK, "")
}

func TestUnitHealth(t *testing.T) {
	h := newUnitHarness(t, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{
			"redis":    func(context.Context) error { return nil },
			"rocketmq": func(context.Context) error { return errors.New("dial tcp 10.1.2.3:9876: connection refused") },
		}
	})
	r := h.do("GET", "/healthz", "", nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "ok" {
		t.Fatalf("healthz %s", r.body)
	}
	r = h.do("GET", "/readyz", "", nil)
	expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
	msg := r.json(t)["error"].(map[string]any)["message"].(string)
	if !strings.Contains(msg, "rocketmq") || strings.Contains(msg, "redis") {
		t.Fatalf("readyz message %q", msg)
	}
	if strings.Contains(string(r.body), "10.1.2.3") || strings.Contains(string(r.body), "refused") {
		t.Fatalf("readyz leaks details: %s", r.body)
	}
	if checks := r.json(t)["checks"].(map[string]any); checks["redis"] != "ok" || checks["rocketmq"] != "down" {
		t.Fatalf("checks %v", checks)
	}

	ok := newUnitHarness(t, func(_ *config.API, d *api.Deps) {
		d.Checks = map[string]api.Check{"redis": func(context.Context) error { return nil }}
	})
	r = ok.do("GET", "/readyz", "", nil)
	expect(t, r, http.StatusOK, "")
	if r.json(t)["status"] != "ready" {
		t.Fatalf("readyz %s", r.body)
	}
}

func TestUnitRouterErrors(t *testing.T) {
	h := newUnitHarness(t)
	h.srv.Engine().GET("/test/panic", func(*gin.Context) { panic("boom: secret detail") })
	expectErr(t, h.do("GET", "/no/such/route", "", nil), http.StatusNotFound, "NOT_FOUND")
	expectErr(t, h.do("GET", "/api/v1/nothing", "", nil), http.StatusNotFound, "NOT_FOUND")
	expectErr(t, h.do("DELETE", "/api/v1/items/1", "", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	expectErr(t, h.do("GET", "/api/v1/seckill/1", "", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	expectErr(t, h.do("PUT", "/api/v1/orders/x/cancel", "", nil), http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED")
	r := h.do("GET", "/test/panic", "", nil)
	expectErr(t, r, http.StatusInternalServerError, "INTERNAL")
	if strings.Contains(string(r.body), "boom") || strings.Contains(string(r.body), "goroutine") {
		t.Fatalf("500 body leaks details: %s", r.body)
	}
	m := h.do("GET", "/metrics", "", nil)
	expect(t, m, http.StatusOK, "")
	if !strings.Contains(string(m.body), `seckill_rejections_total{reason="NOT_FOUND"}`) {
		t.Fatalf("metrics lack the rejections: %.300s", m.body)
	}
}
