package controlroom

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// fakeBooksDB is MySQL's side of the snapshot: the items' rows.
type fakeBooksDB map[int64]store.ItemState

func (f fakeBooksDB) ReadItemState(_ context.Context, id int64) (store.ItemState, error) {
	st, ok := f[id]
	if !ok {
		return store.ItemState{}, order.ErrItemNotFound
	}
	return st, nil
}

type fakeBooksRedis struct{}

func (fakeBooksRedis) ReadItemState(context.Context, int64) (stock.ItemState, error) {
	return stock.ItemState{}, nil
}

var (
	_ snapshot.MySQL = fakeBooksDB(nil)
	_ snapshot.Redis = fakeBooksRedis{}
	_ books.Recorder = (*fakeRecorder)(nil)
)

// fakeRecorder is the provider's own ledger: its records by payment id,
// failing once it has answered failAfter reads (0: never).
type fakeRecorder struct {
	mu        sync.Mutex
	recs      map[string]provider.Record
	reads     int
	failAfter int
}

func (f *fakeRecorder) Record(_ context.Context, id string) (provider.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAfter > 0 && f.reads >= f.failAfter {
		return provider.Record{}, provider.ErrRateLimited
	}
	f.reads++
	return f.recs[id], nil
}

func (f *fakeRecorder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

// booksSale is item 7 at 999 EUR: a paid order, a refunded one, an order
// whose checkout is still open.
func booksSale(now time.Time) store.ItemState {
	payBy, paid := now.Add(-10*time.Minute), now.Add(-20*time.Minute)
	pay := func(id int64, orderID, pid, status string) store.Payment {
		p := store.Payment{ID: id, OrderID: orderID, UserID: id, ItemID: 7, Provider: "testpay", ProviderPaymentID: pid,
			Amount: 999, Currency: "EUR", Status: status, PayBy: payBy, UpdatedAt: paid}
		if status == store.PaymentSucceeded {
			p.SucceededAt = &paid
		}
		return p
	}
	return store.ItemState{
		Item: store.Item{ID: 7, PriceCents: 999, Currency: "EUR", StockTotal: 3},
		Orders: []store.Order{
			{OrderID: "o-paid", UserID: 1, ItemID: 7, Status: order.StatusPaid, PayBy: &payBy, PaidAt: &paid, UpdatedAt: paid},
			{OrderID: "o-back", UserID: 2, ItemID: 7, Status: order.StatusRefunded, Reason: order.ReasonBuyerCancelled, PayBy: &payBy, UpdatedAt: paid},
			{OrderID: "o-open", UserID: 3, ItemID: 7, Status: order.StatusPendingPayment, PayBy: &payBy, UpdatedAt: paid},
		},
		Payments: []store.Payment{pay(1, "o-paid", "pi_1", store.PaymentSucceeded), pay(2, "o-back", "pi_2", store.PaymentSucceeded),
			pay(3, "o-open", "pi_3", store.PaymentPending)},
		Refunds: []store.Refund{{ID: 1, OrderID: "o-back", PaymentID: 2, ProviderPaymentID: "pi_2", Amount: 999, Currency: "EUR",
			Status: store.RefundSucceeded, CreatedAt: paid}},
	}
}

// The provider's records when they agree with booksSale.
func agreeing() map[string]provider.Record {
	return map[string]provider.Record{
		"pi_1": {PaymentID: "pi_1", Currency: "EUR", Captured: 999},
		"pi_2": {PaymentID: "pi_2", Currency: "EUR", Captured: 999, Refunded: 999},
		"pi_3": {PaymentID: "pi_3", Currency: "EUR"},
	}
}

type booksHarness struct {
	e       *gin.Engine
	now     time.Time
	rec     *fakeRecorder
	metrics BooksMetrics
	allowed bool
}

func newBooksHarness(t *testing.T, rec *fakeRecorder, budget int) *booksHarness {
	t.Helper()
	gin.SetMode(gin.TestMode)
	h := &booksHarness{e: gin.New(), now: time.Now(), rec: rec, metrics: NewBooksMetrics(prometheus.NewRegistry()), allowed: true}
	bk := Books{Sources: snapshot.Sources{MySQL: fakeBooksDB{7: booksSale(h.now)}, Redis: fakeBooksRedis{}}, Grace: 2 * time.Minute}
	if rec != nil {
		bk.Ledger = books.Ledger{Name: "testpay", Recorder: rec, Budget: budget}
	}
	Register(h.e, Deps{Items: fakeItems{}, Pulses: fakeFigures{}, Orders: fakeFigures{}, Books: bk, BooksMetrics: h.metrics,
		Now: func() time.Time { return h.now },
		Admin: func(c *gin.Context) {
			if !h.allowed {
				apierr.Write(c, apierr.ErrForbidden)
			}
		},
		Fail:     func(c *gin.Context, err error) { apierr.Write(c, apierr.To(err)) },
		NotFound: func(c *gin.Context) { apierr.Write(c, apierr.ErrNoRoute) },
	})
	return h
}

// get asks the sale's books; the answer's body is decoded into a BooksCheck
// on 200, else its error code is returned.
func (h *booksHarness) get(t *testing.T, path string) (int, BooksCheck, string) {
	t.Helper()
	w := httptest.NewRecorder()
	h.e.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	var b BooksCheck
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
			t.Fatalf("%s: %v: %s", path, err, w.Body)
		}
		return w.Code, b, ""
	}
	var e struct{ Error apierr.Object }
	_ = json.Unmarshal(w.Body.Bytes(), &e)
	return w.Code, b, e.Error.Code
}

func eur(captured, refunded, pending int64) []store.Money {
	return []store.Money{{Currency: "EUR", Captured: captured, Refunded: refunded, RefundsPending: pending}}
}

func sameMoney(a, b []store.Money) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The books route: admin only, a bad id 400, an unknown sale 404; a sale
// whose provider records agree is ours and theirs side by side, no problem;
// the same sale asked again within booksTTL is the same reading (no second
// round of provider calls), and after it a new one.
func TestBooksRouteAgrees(t *testing.T) {
	h := newBooksHarness(t, &fakeRecorder{recs: agreeing()}, 0)
	h.allowed = false
	if code, _, ec := h.get(t, "/api/v1/admin/items/7/books"); code != http.StatusForbidden || ec != "FORBIDDEN" {
		t.Fatalf("without the admin hook's consent: %d %s", code, ec)
	}
	h.allowed = true
	if code, _, ec := h.get(t, "/api/v1/admin/items/x7/books"); code != http.StatusBadRequest || ec != "BAD_REQUEST" {
		t.Fatalf("a bad id: %d %s", code, ec)
	}
	if code, _, ec := h.get(t, "/api/v1/admin/items/8/books"); code != http.StatusNotFound || ec != "ITEM_NOT_FOUND" {
		t.Fatalf("an unknown sale: %d %s", code, ec)
	}

	code, b, _ := h.get(t, "/api/v1/admin/items/7/books")
	if code != http.StatusOK || b.ItemID != 7 || b.Provider != "testpay" || b.Budget != BooksBudget || b.Payments != 3 ||
		b.ProviderRead != 3 || b.ProviderError != "" || len(b.Problems) != 0 || b.RefundsStuck != 0 {
		t.Fatalf("agreeing books: %d %+v", code, b)
	}
	if !sameMoney(b.Money, eur(2*999, 999, 0)) || !sameMoney(b.MoneyRead, b.Money) || !sameMoney(b.ProviderMoney, b.Money) {
		t.Fatalf("ours %+v, ours read %+v, the provider's %+v; want 19.98 captured, 9.99 refunded each", b.Money, b.MoneyRead, b.ProviderMoney)
	}
	if n := testutil.ToFloat64(h.metrics.Checks.WithLabelValues(BooksAgree)); n != 1 {
		t.Fatalf("%v checks agreed, want 1", n)
	}
	if n := testutil.ToFloat64(h.metrics.Records); n != 3 {
		t.Fatalf("%v records counted, want 3", n)
	}

	h.now = h.now.Add(booksTTL / 2)
	if code, again, _ := h.get(t, "/api/v1/admin/items/7/books"); code != http.StatusOK || !again.ReadAt.Equal(b.ReadAt) || h.rec.count() != 3 {
		t.Fatalf("asked again within %s: %d, read at %s (first %s), %d provider reads", booksTTL, code, again.ReadAt, b.ReadAt, h.rec.count())
	}
	h.now = h.now.Add(booksTTL)
	if code, again, _ := h.get(t, "/api/v1/admin/items/7/books"); code != http.StatusOK || !again.ReadAt.After(b.ReadAt) || h.rec.count() != 6 {
		t.Fatalf("asked after %s: %d, read at %s, %d provider reads", booksTTL, code, again.ReadAt, h.rec.count())
	}
}

// A refund of part of a payment in the provider's dashboard: the provider's
// figures differ from ours, and the problem names the order.
func TestBooksRouteNamesWhatDiffers(t *testing.T) {
	recs := agreeing()
	recs["pi_1"] = provider.Record{PaymentID: "pi_1", Currency: "EUR", Captured: 999, Refunded: 500}
	h := newBooksHarness(t, &fakeRecorder{recs: recs}, 0)
	code, b, _ := h.get(t, "/api/v1/admin/items/7/books")
	if code != http.StatusOK || len(b.Problems) != 1 {
		t.Fatalf("%d %+v", code, b)
	}
	if p := b.Problems[0]; p.Kind != books.ProviderDiffers || p.OrderID != "o-paid" || p.PaymentID != "pi_1" || p.Detail == "" {
		t.Fatalf("problem %+v, want provider_differs of order o-paid", p)
	}
	if !sameMoney(b.ProviderMoney, eur(2*999, 999+500, 0)) || !sameMoney(b.MoneyRead, eur(2*999, 999, 0)) {
		t.Fatalf("the provider's %+v, ours %+v", b.ProviderMoney, b.MoneyRead)
	}
	if n := testutil.ToFloat64(h.metrics.Checks.WithLabelValues(BooksDiffer)); n != 1 {
		t.Fatalf("%v checks differed, want 1", n)
	}
}

// Within a budget: the payments that took money are read first, and ours
// over the payments read stands beside the provider's; a provider that
// stops answering leaves the comparison as far as it read, said.
func TestBooksRouteBudgetAndProviderError(t *testing.T) {
	h := newBooksHarness(t, &fakeRecorder{recs: agreeing()}, 2)
	code, b, _ := h.get(t, "/api/v1/admin/items/7/books")
	if code != http.StatusOK || b.Budget != 2 || b.Payments != 3 || b.ProviderRead != 2 || len(b.Problems) != 0 ||
		!sameMoney(b.ProviderMoney, b.MoneyRead) || !sameMoney(b.MoneyRead, eur(2*999, 999, 0)) {
		t.Fatalf("within a budget of 2: %d %+v", code, b)
	}

	h = newBooksHarness(t, &fakeRecorder{recs: agreeing(), failAfter: 1}, 0)
	code, b, _ = h.get(t, "/api/v1/admin/items/7/books")
	if code != http.StatusOK || b.ProviderRead != 1 || b.ProviderError == "" ||
		!sameMoney(b.Money, eur(2*999, 999, 0)) {
		t.Fatalf("the provider stopping after one read: %d %+v", code, b)
	}
	if n := testutil.ToFloat64(h.metrics.Checks.WithLabelValues(BooksProviderError)); n != 1 {
		t.Fatalf("%v checks with a provider error, want 1", n)
	}
}

// Under door (no provider): our books only, an empty comparison; an
// instance without the books' sources answers 503.
func TestBooksRouteWithoutProvider(t *testing.T) {
	h := newBooksHarness(t, nil, 0)
	code, b, _ := h.get(t, "/api/v1/admin/items/7/books")
	if code != http.StatusOK || b.Provider != "door" || b.Payments != 0 || b.ProviderRead != 0 || len(b.ProviderMoney) != 0 ||
		len(b.MoneyRead) != 0 || !sameMoney(b.Money, eur(2*999, 999, 0)) {
		t.Fatalf("door: %d %+v", code, b)
	}
	if n := testutil.ToFloat64(h.metrics.Checks.WithLabelValues(BooksNoProvider)); n != 1 {
		t.Fatalf("%v checks without a provider, want 1", n)
	}

	gin.SetMode(gin.TestMode)
	e := gin.New()
	Register(e, Deps{Items: fakeItems{}, Now: time.Now, Admin: func(*gin.Context) {},
		Fail: func(c *gin.Context, err error) { apierr.Write(c, apierr.To(err)) }})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/admin/items/7/books", nil))
	if w.Code != http.StatusServiceUnavailable {
		t.Fatalf("no sources: %d %s", w.Code, w.Body)
	}
}
