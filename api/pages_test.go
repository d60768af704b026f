package api_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/controlroom"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// SaleMoney: the fake table has no payments.
func (f *fakeOrders) SaleMoney(context.Context, []int64) (map[int64][]store.Money, error) {
	return map[int64][]store.Money{}, nil
}

// CountBySecond: the series is tested in package controlroom.
func (f *fakeOrders) CountBySecond(context.Context, []int64) ([]store.SaleSecond, error) {
	return nil, nil
}

// CountOrders counts the fake table's rows (store.Store.CountOrders); only
// the control room's summary calls it, so counts counts its readings.
func (f *fakeOrders) CountOrders(_ context.Context, ids []int64) (map[int64]map[order.Status]int64, error) {
	f.counts.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	want := map[int64]bool{}
	for _, id := range ids {
		want[id] = true
	}
	out := map[int64]map[order.Status]int64{}
	for _, o := range f.rows {
		if !want[o.ItemID] {
			continue
		}
		if out[o.ItemID] == nil {
			out[o.ItemID] = map[order.Status]int64{}
		}
		out[o.ItemID][o.Status]++
	}
	return out, nil
}

func withPages(dev bool) unitOpt {
	return func(_ *config.API, d *api.Deps) {
		d.Temporal.UIURL, d.Temporal.Namespace = "http://ui.example:8233", "default"
		if dev {
			d.DevSecret = testSecret
		}
	}
}

func pagesHarness(t *testing.T, dev bool) *unitHarness {
	t.Helper()
	return newUnitHarness(t, withPages(dev))
}

func TestUnitPagesServed(t *testing.T) {
	h := pagesHarness(t, false)
	for path, want := range map[string]string{"/": "text/html", "/admin": "text/html",
		"/assets/store.js": "javascript", "/assets/admin.js": "javascript", "/assets/common.js": "javascript",
		"/assets/app.css": "text/css"} {
		r := h.do("GET", path, "", nil)
		expect(t, r, http.StatusOK, "")
		if ct := r.header.Get("Content-Type"); !strings.Contains(ct, want) {
			t.Fatalf("%s: Content-Type %q, want %s", path, ct, want)
		}
		if strings.HasPrefix(want, "text/html") && !strings.Contains(r.header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Fatalf("%s: no content security policy: %v", path, r.header)
		}
		etag := r.header.Get("ETag")
		req, _ := http.NewRequest("GET", h.ts.URL+path, nil)
		req.Header.Set("If-None-Match", etag)
		res, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if etag == "" || res.StatusCode != http.StatusNotModified {
			t.Fatalf("%s: revalidation with ETag %q answered %d", path, etag, res.StatusCode)
		}
	}
	for _, path := range []string{"/assets/", "/assets/nope.js", "/assets/../index.html", "/assets/%2e%2e/index.html", "/index.html", "/admin.html"} {
		expectErr(t, h.do("GET", path, "", nil), http.StatusNotFound, "NOT_FOUND")
	}
}

func TestUnitServerTimeAndDevSignIn(t *testing.T) {
	off := pagesHarness(t, false)
	r := off.do("GET", "/api/v1/time", "", nil)
	expect(t, r, http.StatusOK, "")
	m := r.json(t)
	now, err := time.Parse(time.RFC3339Nano, m["now"].(string))
	if err != nil || time.Since(now).Abs() > time.Minute || m["dev"] != false {
		t.Fatalf("time %s", r.body)
	}
	// Without the development switch the route does not exist.
	expectErr(t, off.do("POST", "/api/v1/dev/token", "", map[string]any{"user_id": 7}), http.StatusNotFound, "NOT_FOUND")

	on := pagesHarness(t, true)
	if on.do("GET", "/api/v1/time", "", nil).json(t)["dev"] != true {
		t.Fatal("time does not announce the development sign-in")
	}
	r = on.do("POST", "/api/v1/dev/token", "", map[string]any{"user_id": 7})
	expect(t, r, http.StatusOK, "")
	p, err := auth.NewVerifier(testSecret).Verify(r.json(t)["token"].(string))
	if err != nil || p.UserID != 7 || p.Role != auth.RoleBuyer {
		t.Fatalf("dev token %s: %+v %v", r.body, p, err)
	}
	r = on.do("POST", "/api/v1/dev/token", "", map[string]any{"user_id": 1, "role": "admin"})
	expect(t, r, http.StatusOK, "")
	if p, _ := auth.NewVerifier(testSecret).Verify(r.json(t)["token"].(string)); p.Role != auth.RoleAdmin {
		t.Fatalf("admin dev token %s", r.body)
	}
	for _, bad := range []any{map[string]any{"user_id": 0}, map[string]any{"user_id": 7, "role": "root"},
		map[string]any{"user_id": "7"}, "not json", map[string]any{"user_id": 2_000_000_000}} {
		expectErr(t, on.do("POST", "/api/v1/dev/token", "", bad), http.StatusBadRequest, "BAD_REQUEST")
	}
}

func TestUnitAdminSummary(t *testing.T) {
	h := pagesHarness(t, false)
	expectErr(t, h.do("GET", "/api/v1/admin/summary", "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("GET", "/api/v1/admin/summary", h.buyer(5), nil), http.StatusForbidden, "FORBIDDEN")

	id := h.onSale(10)
	old := h.item(3, time.Now().Add(-3*time.Hour), time.Now().Add(-2*time.Hour)) // ended over an hour ago
	for u := int64(1); u <= 3; u++ {
		expect(t, h.do("POST", fmt.Sprintf("/api/v1/seckill/%d", id), h.buyer(u), nil), http.StatusAccepted, "")
	}
	// Two of the three are persisted: one pending, one paid, whose first pay
	// the door accepted 250 ms after its 202 (the view it published then).
	reserved := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	paid := ulid.MustNew(ulid.Timestamp(reserved), rand.Reader).String()
	payBy := reserved.Add(900 * time.Second)
	h.orders.put(store.Order{OrderID: paid, UserID: 1, ItemID: id, Status: order.StatusPaid, PayBy: &payBy})
	h.orders.put(store.Order{OrderID: order.NewID(), UserID: 2, ItemID: id, Status: order.StatusPendingPayment, PayBy: &payBy})
	view := order.View{OrderID: paid, ItemID: id, UserID: 1, Status: order.StatusPaid, Settling: true, PayBy: &payBy, UpdatedAt: reserved.Add(250 * time.Millisecond)}
	h.views.publish(order.View{OrderID: paid, ItemID: id, UserID: 1, Status: order.StatusQueued, PayBy: &payBy, UpdatedAt: reserved})
	h.views.publish(view)
	// The saga settles it a minute later: the same pay, not a second one.
	view.Settling, view.UpdatedAt = false, reserved.Add(time.Minute)
	h.views.publish(view)

	type summary struct {
		ServerTime time.Time `json:"server_time"`
		ReadAt     time.Time `json:"read_at"`
		Sales      []struct {
			Item          sale.ItemView              `json:"item"`
			UnitsLeft     *int64                     `json:"units_left"`
			Accepted      int64                      `json:"accepted"`
			Orders        map[order.Status]int64     `json:"orders"`
			Payable       controlroom.PayableLatency `json:"payable"`
			OutboxBacklog int64                      `json:"outbox_backlog"`
			SagasURL      string                     `json:"sagas_url"`
		} `json:"sales"`
	}
	read := func() summary {
		var s summary
		r := h.do("GET", "/api/v1/admin/summary", h.admin, nil)
		expect(t, r, http.StatusOK, "")
		if err := json.Unmarshal(r.body, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// The reading is reused for summaryTTL: wait for one that has the
	// paid order (a positive signal, not a sleep).
	var s summary
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		s = read()
		if len(s.Sales) == 1 && s.Sales[0].Payable.Count == 1 && s.Sales[0].Orders[order.StatusPaid] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary %+v", s)
		}
	}
	got := s.Sales[0]
	if got.Item.ID != id || got.UnitsLeft == nil || *got.UnitsLeft != 7 || got.Accepted != 3 {
		t.Fatalf("sale %+v", got)
	}
	// Three accepted, two rows past QUEUED: one still QUEUED.
	if got.Orders[order.StatusQueued] != 1 || got.Orders[order.StatusPendingPayment] != 1 || got.Orders[order.StatusFailed] != 0 {
		t.Fatalf("orders by status %v", got.Orders)
	}
	// Read from seckill_order_first_pay_seconds, interpolated in its bucket.
	if p50, p99 := got.Payable.P50MS, got.Payable.P99MS; got.Payable.Count != 1 || p50 == nil || *p50 < 225 || *p50 > 275 || p99 == nil || *p99 < *p50 || *p99 > 280 {
		t.Fatalf("202 -> first pay %+v, want one pay at about 250 ms", got.Payable)
	}
	if !strings.HasPrefix(got.SagasURL, "http://ui.example:8233/namespaces/default/workflows?query=") ||
		!strings.Contains(got.SagasURL, fmt.Sprintf("SeckillItemId%%3D%d", id)) {
		t.Fatalf("sagas link %q", got.SagasURL)
	}
	for _, sale := range s.Sales {
		if sale.Item.ID == old {
			t.Fatal("a sale ended over an hour ago is listed")
		}
	}

	// Many polls share a reading: at most one read of Redis per 500 ms.
	before, start := h.orders.counts.Load(), time.Now()
	for range 20 {
		read()
	}
	reads := h.orders.counts.Load() - before
	if limit := int64(time.Since(start)/(500*time.Millisecond)) + 1; reads > limit {
		t.Fatalf("%d readings for 20 polls in %s (cache of 500 ms allows %d)", reads, time.Since(start), limit)
	}

	// Redis down: the error is the API's, in JSON.
	h.units.fail(errDown)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		r := h.do("GET", "/api/v1/admin/summary", h.admin, nil)
		if r.status == http.StatusServiceUnavailable {
			expectErr(t, r, http.StatusServiceUnavailable, "UNAVAILABLE")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("summary with Redis down: %d %s", r.status, r.body)
		}
	}
}

// GET /api/v1/events/keys publishes the order events' public keys, the
// current first, each with its id: what a shop verifies events with.
func TestUnitEventKeys(t *testing.T) {
	cur, old := ed25519.NewKeyFromSeed(make([]byte, 32)), ed25519.NewKeyFromSeed([]byte("0123456789abcdef0123456789abcdef"))
	h := newUnitHarness(t, func(_ *config.API, d *api.Deps) {
		d.EventKeys = []ed25519.PublicKey{cur.Public().(ed25519.PublicKey), old.Public().(ed25519.PublicKey)}
	})
	r := h.do("GET", "/api/v1/events/keys", "", nil)
	expect(t, r, http.StatusOK, "")
	var got struct{ Keys []api.EventKey }
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Keys) != 2 {
		t.Fatalf("keys %s", r.body)
	}
	for i, k := range []ed25519.PrivateKey{cur, old} {
		pub := k.Public().(ed25519.PublicKey)
		if g := got.Keys[i]; g.Alg != "Ed25519" || g.PublicKey != base64.StdEncoding.EncodeToString(pub) || g.KeyID != events.KeyID(pub) {
			t.Errorf("key %d: %+v", i, g)
		}
	}
}

// booksDB is MySQL's side of a books check: item 7, one paid order.
type booksDB struct{}

func (booksDB) ReadItemState(_ context.Context, id int64) (store.ItemState, error) {
	if id != 7 {
		return store.ItemState{}, order.ErrItemNotFound
	}
	at := time.Now().Add(-time.Hour)
	return store.ItemState{Item: store.Item{ID: 7, PriceCents: 999, Currency: "EUR", StockTotal: 1},
		Orders: []store.Order{{OrderID: "o-1", UserID: 1, ItemID: 7, Status: order.StatusPaid, PayBy: &at, PaidAt: &at, UpdatedAt: at}},
		Payments: []store.Payment{{ID: 1, OrderID: "o-1", UserID: 1, ItemID: 7, Provider: "testpay", ProviderPaymentID: "pi_1",
			Amount: 999, Currency: "EUR", Status: store.PaymentSucceeded, PayBy: at, SucceededAt: &at, UpdatedAt: at}}}, nil
}

type booksRedis struct{}

func (booksRedis) ReadItemState(context.Context, int64) (stock.ItemState, error) {
	return stock.ItemState{}, nil
}

// booksLedger is the provider's record of pi_1: 9.99 captured, 5.00 of it
// refunded in its dashboard.
type booksLedger struct{}

func (booksLedger) Record(context.Context, string) (provider.Record, error) {
	return provider.Record{PaymentID: "pi_1", Currency: "EUR", Captured: 999, Refunded: 500}, nil
}

// The books route through the API: admin only; its answers (with a
// provider, under door, an unknown sale, and an instance without the
// books' sources) are the document's.
func TestUnitAdminItemBooks(t *testing.T) {
	withBooks := func(rec books.Recorder) unitOpt {
		return func(_ *config.API, d *api.Deps) {
			d.Books = controlroom.Books{Sources: snapshot.Sources{MySQL: booksDB{}, Redis: booksRedis{}}, Grace: time.Minute}
			if rec != nil {
				d.Books.Ledger = books.Ledger{Name: "testpay", Recorder: rec, Budget: controlroom.BooksBudget}
			}
		}
	}
	h := newUnitHarness(t, withBooks(booksLedger{}))
	expectErr(t, h.do("GET", "/api/v1/admin/items/7/books", "", nil), http.StatusUnauthorized, "UNAUTHORIZED")
	expectErr(t, h.do("GET", "/api/v1/admin/items/7/books", h.buyer(5), nil), http.StatusForbidden, "FORBIDDEN")
	expectErr(t, h.do("GET", "/api/v1/admin/items/0/books", h.admin, nil), http.StatusBadRequest, "BAD_REQUEST")
	expectErr(t, h.do("GET", "/api/v1/admin/items/8/books", h.admin, nil), http.StatusNotFound, "ITEM_NOT_FOUND")
	r := h.do("GET", "/api/v1/admin/items/7/books", h.admin, nil)
	expect(t, r, http.StatusOK, "")
	var b controlroom.BooksCheck
	if err := json.Unmarshal(r.body, &b); err != nil || b.Provider != "testpay" || b.ProviderRead != 1 || len(b.Problems) != 1 ||
		b.Problems[0].Kind != books.ProviderDiffers || b.Problems[0].OrderID != "o-1" {
		t.Fatalf("books against the provider: %v %s", err, r.body)
	}

	h = newUnitHarness(t, withBooks(nil))
	r = h.do("GET", "/api/v1/admin/items/7/books", h.admin, nil)
	expect(t, r, http.StatusOK, "")
	if err := json.Unmarshal(r.body, &b); err != nil || b.Provider != "door" || b.ProviderRead != 0 || len(b.ProviderMoney) != 0 || len(b.Money) != 1 {
		t.Fatalf("books under door: %v %s", err, r.body)
	}

	h = newUnitHarness(t)
	expectErr(t, h.do("GET", "/api/v1/admin/items/7/books", h.admin, nil), http.StatusServiceUnavailable, "UNAVAILABLE")
}
