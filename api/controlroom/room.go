// Package controlroom serves the pages (package web's storefront and control
// room), the admin summary they poll, with its 202 -> first pay latencies,
// each sale over time, and a sale's books against the provider's own ledger.
package controlroom

import (
	"context"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/web"
)

// Items is the item read model (sale.Cache).
type Items interface {
	Shown(now time.Time) []store.Item
	Known(itemID int64) bool
	View(it store.Item, left int64, now time.Time) any
}

// Pulses are the sales' live figures in Redis (stock.Store).
type Pulses interface {
	Pulses(ctx context.Context, itemIDs []int64) (map[int64]stock.Pulse, error)
}

// OrderCounts counts persisted orders by status, and by kind and second
// since the sale's start, and sums the sales' payments and refunds
// (store.Store).
type OrderCounts interface {
	CountOrders(ctx context.Context, itemIDs []int64) (map[int64]map[order.Status]int64, error)
	SaleMoney(ctx context.Context, itemIDs []int64) (map[int64][]store.Money, error)
	CountBySecond(ctx context.Context, itemIDs []int64) ([]store.SaleSecond, error)
}

// Histogram is seckill_order_first_pay_seconds by item_id
// (*prometheus.HistogramVec).
type Histogram interface {
	WithLabelValues(lvs ...string) prometheus.Observer
	GetMetricWithLabelValues(lvs ...string) (prometheus.Observer, error)
	DeleteLabelValues(lvs ...string) bool
}

// Deps are what the control room is built from. Temporal is optional;
// Books without its sources answers 503, BooksMetrics unset counts
// unregistered.
type Deps struct {
	Items        Items
	Pulses       Pulses
	Orders       OrderCounts
	FirstPay     Histogram
	Books        Books
	BooksMetrics BooksMetrics
	Temporal     config.Temporal
	// The API's admin check, error answer and unknown route's answer.
	Admin    gin.HandlerFunc
	Fail     func(c *gin.Context, err error)
	NotFound gin.HandlerFunc
	Now      func() time.Time
}

// Room serves the pages, the admin summary and series, and counts first pays.
type Room struct {
	d          Deps
	pages      map[string]page
	sums       apierr.Reused[summaryBody]
	series     apierr.Reused[seriesBody]
	paid       firstPays
	checks     bookChecks
	temporalUI string // the sagas' list in the Temporal Web UI, or ""
}

// Register adds the control room's routes to r.
func Register(r gin.IRoutes, d Deps) *Room {
	if d.BooksMetrics.Checks == nil || d.BooksMetrics.Records == nil {
		d.BooksMetrics = NewBooksMetrics(prometheus.NewRegistry())
	}
	rm := &Room{d: d, pages: loadPages(web.Files()), paid: firstPays{byItem: make(map[int64]map[string]struct{})},
		checks: bookChecks{one: make(chan struct{}, 1), last: make(map[int64]BooksCheck)}, temporalUI: d.Temporal.WorkflowsURL("")}
	r.GET("/", func(c *gin.Context) { rm.writePage(c, "index.html") })
	r.GET("/admin", func(c *gin.Context) { rm.writePage(c, "admin.html") })
	r.GET("/assets/*file", rm.asset)
	r.GET("/api/v1/admin/summary", d.Admin, rm.adminSummary)
	r.GET("/api/v1/admin/series", d.Admin, rm.adminSeries)
	r.GET("/api/v1/admin/items/:id/books", d.Admin, apierr.Handle(d.Fail, rm.adminBooks))
	return rm
}

// NewFirstPay registers seckill_order_first_pay_seconds (Deps.FirstPay) on reg.
func NewFirstPay(reg prometheus.Registerer) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "seckill_order_first_pay_seconds",
		Help: "Time from an order's 202 (its id's timestamp) to the first pay of it the door accepted, by item: what a buyer who pays at once waits for. " +
			"Every API instance observes every order (from the order views all instances receive): read one instance's series, not their sum.",
		// 5 ms to 10 min (a payment window), about 22 % apart.
		Buckets: prometheus.ExponentialBucketsRange(0.005, 600, 60),
	}, []string{"item_id"})
	reg.MustRegister(h)
	return h
}
