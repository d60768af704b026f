package controlroom

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

type fakeItems map[int64]store.Item

func (f fakeItems) Shown(now time.Time) []store.Item {
	var out []store.Item
	for _, it := range f {
		if now.Sub(it.EndAt) < time.Hour {
			out = append(out, it)
		}
	}
	return out
}
func (f fakeItems) Known(id int64) bool { _, ok := f[id]; return ok }
func (f fakeItems) View(it store.Item, left int64, _ time.Time) any {
	return map[string]int64{"id": it.ID, "left": left}
}

type fakeFigures struct{}

func (fakeFigures) Pulses(_ context.Context, ids []int64) (map[int64]stock.Pulse, error) {
	return map[int64]stock.Pulse{ids[0]: {Marks: 3, Left: 7, Loaded: true}}, nil
}
func (fakeFigures) SaleMoney(_ context.Context, ids []int64) (map[int64][]store.Money, error) {
	return map[int64][]store.Money{ids[0]: {{Currency: "EUR", Captured: 1998, Refunded: 999, RefundsPending: 0}}}, nil
}

func (fakeFigures) CountBySecond(_ context.Context, ids []int64) ([]store.SaleSecond, error) {
	return []store.SaleSecond{{ItemID: 9, Kind: "accepted", Second: 0, N: 2}, {ItemID: 9, Kind: "accepted", Second: 2, N: 1},
		{ItemID: 9, Kind: "paid", Second: 4, N: 1}, {ItemID: 9, Kind: "refunded", Second: 1250, N: 1},
		{ItemID: 9, Kind: "paid", Second: 9999, N: 1}}, nil // a clock ahead of the API's: past the series
}
func (fakeFigures) CountOrders(_ context.Context, ids []int64) (map[int64]map[order.Status]int64, error) {
	return map[int64]map[order.Status]int64{ids[0]: {order.StatusPaid: 1}}, nil
}

// The room alone, with fakes for what it reads: the admin hook gates the
// summary, a first pay counts once however often its view comes, the
// summary reads it from the histogram, and a sale no longer shown loses its
// series.
func TestRoomSummaryAndFirstPays(t *testing.T) {
	gin.SetMode(gin.TestMode)
	now := time.Now()
	items := fakeItems{9: {ID: 9, StockTotal: 10, StartAt: now.Add(-time.Minute), EndAt: now.Add(time.Hour)}}
	hist := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h", Buckets: prometheus.ExponentialBucketsRange(0.005, 600, 60)}, []string{"item_id"})
	allowed := false
	e := gin.New()
	rm := Register(e, Deps{Items: items, Pulses: fakeFigures{}, Orders: fakeFigures{}, FirstPay: hist, Now: time.Now,
		Admin: func(c *gin.Context) {
			if !allowed {
				c.AbortWithStatus(http.StatusForbidden)
			}
		},
		Fail:     func(c *gin.Context, err error) { c.AbortWithStatus(http.StatusServiceUnavailable) },
		NotFound: func(c *gin.Context) { c.AbortWithStatus(http.StatusNotFound) },
	})
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		e.ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/admin/summary", nil))
		return w
	}
	if w := get(); w.Code != http.StatusForbidden {
		t.Fatalf("summary without the admin hook's consent: %d", w.Code)
	}
	allowed = true

	reserved := now.Add(-time.Second).Truncate(time.Millisecond)
	id := ulid.MustNew(ulid.Timestamp(reserved), rand.Reader).String()
	v := order.View{OrderID: id, ItemID: 9, Status: order.StatusPaid, UpdatedAt: reserved.Add(250 * time.Millisecond)}
	rm.ObserveFirstPay(v)
	v.UpdatedAt = reserved.Add(time.Minute) // the saga's later view of the same pay
	rm.ObserveFirstPay(v)
	rm.ObserveFirstPay(order.View{OrderID: id, ItemID: 404, Status: order.StatusPaid, UpdatedAt: v.UpdatedAt}) // unknown item

	w := get()
	var body struct {
		Sales []SaleSummary `json:"sales"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil || len(body.Sales) != 1 {
		t.Fatalf("summary %d %s", w.Code, w.Body)
	}
	s := body.Sales[0]
	if p := s.Payable; p.Count != 1 || p.P50MS == nil || *p.P50MS < 225 || *p.P50MS > 275 {
		t.Fatalf("202 -> first pay %+v, want one pay at about 250 ms", p)
	}
	if s.Orders[order.StatusQueued] != 2 || s.Orders[order.StatusPaid] != 1 || *s.UnitsLeft != 7 ||
		len(s.Money) != 1 || s.Money[0] != (store.Money{Currency: "EUR", Captured: 1998, Refunded: 999}) {
		t.Fatalf("sale %+v", s)
	}
	if n := testCount(t, hist); n != 1 { // item 9's: none for the unknown item
		t.Fatalf("%d series, want 1", n)
	}

	rm.ForgetFirstPays(now.Add(3 * time.Hour)) // the sale ended over an hour ago
	if n := testCount(t, hist); n != 0 {
		t.Fatalf("%d series left after the sale is no longer shown", n)
	}
	if rm.firstPayLatency(9).Count != 0 {
		t.Fatal("a forgotten sale still reports first pays")
	}
}

// testCount counts hist's series.
func testCount(t *testing.T, hist *prometheus.HistogramVec) int {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	hist.Collect(ch)
	close(ch)
	return len(ch)
}

// The series: a sale that started 1,250 s ago in 3 s buckets (at most 600),
// each count in its bucket; an upcoming sale has none yet.
func TestRoomSeries(t *testing.T) {
	gin.SetMode(gin.TestMode)
	now := time.Now()
	items := fakeItems{9: {ID: 9, StartAt: now.Add(-1250 * time.Second), EndAt: now.Add(time.Hour)},
		10: {ID: 10, StartAt: now.Add(time.Minute), EndAt: now.Add(time.Hour)}}
	e := gin.New()
	Register(e, Deps{Items: items, Pulses: fakeFigures{}, Orders: fakeFigures{}, Now: func() time.Time { return now },
		Admin: func(*gin.Context) {}, Fail: func(c *gin.Context, err error) { c.AbortWithStatus(http.StatusServiceUnavailable) }})
	w := httptest.NewRecorder()
	e.ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/admin/series", nil))
	var body struct{ Sales []Series }
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &body) != nil || len(body.Sales) != 1 {
		t.Fatalf("series %d %s", w.Code, w.Body)
	}
	s := body.Sales[0]
	if s.ItemID != 9 || s.StepSeconds != 3 || len(s.Accepted) != 417 || len(s.Paid) != 417 || len(s.Refunded) != 417 {
		t.Fatalf("sale %d: step %d s, %d/%d/%d points; want sale 9, 3 s, 417 points", s.ItemID, s.StepSeconds, len(s.Accepted), len(s.Paid), len(s.Refunded))
	}
	if s.Accepted[0] != 3 || s.Paid[1] != 1 || s.Refunded[416] != 1 || sum(s.Accepted)+sum(s.Paid)+sum(s.Refunded) != 5 {
		t.Fatalf("counts misplaced: %+v", s)
	}
}

func sum(xs []int64) (n int64) {
	for _, x := range xs {
		n += x
	}
	return n
}
