package api

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"
	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

// SaleFigures reads the live figures of sales in Redis (stock.Store).
type SaleFigures interface {
	Pulses(ctx context.Context, itemIDs []int64) (map[int64]stock.Pulse, error)
}

// OrderCounts counts orders by item and status in MySQL (store.Store).
type OrderCounts interface {
	CountOrders(ctx context.Context, itemIDs []int64) (map[int64]map[order.Status]int64, error)
}

// summaryTTL is how long one reading of the control room's figures is
// reused. Every admin poll within it shares the reading (one pipelined Redis
// round trip and one index-only MySQL count per instance, whatever the
// number of open control rooms), and the page polls twice as often, so what
// an operator sees is at most about a second old.
const summaryTTL = 500 * time.Millisecond

// summaryMaxItems bounds the sales one summary lists (newest first).
const summaryMaxItems = 100

// SaleSummary is one sale in the control room.
type SaleSummary struct {
	Item ItemView `json:"item"`
	// UnitsLeft is stock_left in Redis; null when the stock is not loaded.
	UnitsLeft *int64 `json:"units_left"`
	// Accepted counts the 202s (the buyer marks in Redis).
	Accepted int64 `json:"accepted"`
	// Orders counts the orders by status. QUEUED is every accepted order
	// without a saga row past QUEUED yet (still in the outbox, the queue or
	// the saga's first step).
	Orders map[order.Status]int64 `json:"orders"`
	// Payable is the time from the 202 to payable (PENDING_PAYMENT: its
	// pay_by minus the payment window), over the orders this instance saw
	// become payable since it started.
	Payable PayableLatency `json:"payable"`
	// OutboxBacklog is the reservations not yet published to RocketMQ.
	OutboxBacklog int64 `json:"outbox_backlog"`
	// SagasURL lists the sale's sagas in the Temporal UI.
	SagasURL string `json:"sagas_url,omitempty"`
}

// PayableLatency summarises 202 -> payable.
type PayableLatency struct {
	Count int64    `json:"count"`
	P50MS *float64 `json:"p50_ms"`
	P99MS *float64 `json:"p99_ms"`
}

// summaryBody is the answer of GET /api/v1/admin/summary.
type summaryBody struct {
	ServerTime time.Time     `json:"server_time"`
	ReadAt     time.Time     `json:"read_at"`
	TemporalUI string        `json:"temporal_ui,omitempty"`
	Sales      []SaleSummary `json:"sales"`
}

// summaryCache holds the last reading.
type summaryCache struct {
	mu   sync.Mutex
	at   time.Time
	body summaryBody
	sf   singleflight.Group
}

// GET /api/v1/admin/summary (admin): the control room's figures of every
// sale that is upcoming, open or ended within the last hour.
func (s *Server) adminSummary(c *gin.Context) {
	if _, ok := s.requireRole(c, auth.RoleAdmin); !ok {
		return
	}
	if s.deps.Figures == nil || s.deps.Counts == nil {
		s.fail(c, ErrUnavailable)
		return
	}
	body, err := s.summary(c.Request.Context())
	if err != nil {
		s.fail(c, err)
		return
	}
	body.ServerTime = s.now().UTC()
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, body)
}

// summary returns the cached reading, or reads anew once it is older than
// summaryTTL (concurrent callers share one reading).
func (s *Server) summary(ctx context.Context) (summaryBody, error) {
	sc := &s.sums
	sc.mu.Lock()
	if !sc.at.IsZero() && s.now().Sub(sc.at) < summaryTTL {
		b := sc.body
		sc.mu.Unlock()
		return b, nil
	}
	sc.mu.Unlock()
	v, err, _ := sc.sf.Do("summary", func() (any, error) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		b, err := s.readSummary(rctx)
		if err != nil {
			return summaryBody{}, err
		}
		sc.mu.Lock()
		sc.at, sc.body = s.now(), b
		sc.mu.Unlock()
		return b, nil
	})
	if err != nil {
		return summaryBody{}, err
	}
	return v.(summaryBody), nil
}

// readSummary reads the figures of the sales this instance knows.
func (s *Server) readSummary(ctx context.Context) (summaryBody, error) {
	now := s.now()
	cis := s.items.all()
	sales := cis[:0]
	for _, ci := range cis {
		if now.Sub(ci.it.EndAt) < endedShown {
			sales = append(sales, ci)
		}
	}
	sort.Slice(sales, func(i, j int) bool { return sales[i].it.ID > sales[j].it.ID })
	if len(sales) > summaryMaxItems {
		sales = sales[:summaryMaxItems]
	}
	ids := make([]int64, len(sales))
	for i, ci := range sales {
		ids[i] = ci.it.ID
	}
	figs, err := s.deps.Figures.Pulses(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	counts, err := s.deps.Counts.CountOrders(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	b := summaryBody{ReadAt: now.UTC(), TemporalUI: s.temporalWorkflows(), Sales: make([]SaleSummary, 0, len(sales))}
	for _, ci := range sales {
		f := figs[ci.it.ID]
		left := ci.it.StockTotal
		var unitsLeft *int64
		if f.Loaded {
			left = f.Left
			unitsLeft = &f.Left
		}
		byStatus := map[order.Status]int64{}
		var beyondQueued int64
		for st, n := range counts[ci.it.ID] {
			if st != order.StatusQueued {
				byStatus[st] = n
				beyondQueued += n
			}
		}
		for _, st := range []order.Status{order.StatusPendingPayment, order.StatusPaid, order.StatusCancelled, order.StatusFailed} {
			byStatus[st] += 0
		}
		byStatus[order.StatusQueued] = max(f.Marks-beyondQueued, counts[ci.it.ID][order.StatusQueued])
		ss := SaleSummary{Item: itemView(ci.it, left, now), UnitsLeft: unitsLeft, Accepted: f.Marks,
			Orders: byStatus, Payable: s.payable.latency(ci.it.ID), OutboxBacklog: f.Outbox}
		if b.TemporalUI != "" {
			ss.SagasURL = b.TemporalUI + "?query=" + url.QueryEscape(fmt.Sprintf("SeckillItemId=%d", ci.it.ID))
		}
		b.Sales = append(b.Sales, ss)
	}
	return b, nil
}

// temporalWorkflows is the Temporal UI's workflow list of the namespace.
func (s *Server) temporalWorkflows() string {
	if s.opts.TemporalUI == "" {
		return ""
	}
	return s.opts.TemporalUI + "/namespaces/" + url.PathEscape(s.opts.TemporalNamespace) + "/workflows"
}

// payableTracker keeps, per item, a histogram of 202 -> payable from the
// order views every instance receives over pub/sub: no query, a few
// nanoseconds per view. The 202 is the order id's timestamp (the API made
// it), payable is pay_by minus the item's payment window (both written by
// the database), as the bench measures it.
type payableTracker struct {
	mu     sync.Mutex
	byItem map[int64]*latencyHistogram
}

// Bucket i of a latencyHistogram holds latencies up to histBase*histGrowth^i:
// 1 ms to about 4 hours at 5 % resolution.
const (
	histBase    = float64(time.Millisecond)
	histGrowth  = 1.05
	histBuckets = 320
)

type latencyHistogram struct {
	count   int64
	buckets [histBuckets]int64
}

func newPayableTracker() *payableTracker {
	return &payableTracker{byItem: make(map[int64]*latencyHistogram)}
}

// observe records an order the moment it is seen payable.
func (p *payableTracker) observe(v order.View, window time.Duration) {
	if v.Status != order.StatusPendingPayment || v.PayBy == nil || window <= 0 {
		return
	}
	id, err := ulid.ParseStrict(v.OrderID)
	if err != nil {
		return
	}
	d := v.PayBy.Add(-window).Sub(ulid.Time(id.Time()))
	i := 0
	if d > time.Duration(histBase) {
		i = int(math.Ceil(math.Log(float64(d)/histBase) / math.Log(histGrowth)))
	}
	i = min(max(i, 0), histBuckets-1)
	p.mu.Lock()
	h := p.byItem[v.ItemID]
	if h == nil {
		h = &latencyHistogram{}
		p.byItem[v.ItemID] = h
	}
	h.count++
	h.buckets[i]++
	p.mu.Unlock()
}

// latency returns p50 and p99 of an item (each the upper bound of its
// bucket, in milliseconds).
func (p *payableTracker) latency(itemID int64) PayableLatency {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.byItem[itemID]
	if h == nil || h.count == 0 {
		return PayableLatency{}
	}
	q := func(f float64) *float64 {
		rank := int64(math.Ceil(f * float64(h.count)))
		var seen int64
		for i, n := range h.buckets {
			if seen += n; seen >= rank {
				ms := math.Round(histBase*math.Pow(histGrowth, float64(i))/float64(time.Millisecond)*10) / 10
				return &ms
			}
		}
		return nil
	}
	return PayableLatency{Count: h.count, P50MS: q(0.50), P99MS: q(0.99)}
}

// forget drops the histograms of items no longer shown.
func (p *payableTracker) forget(keep func(itemID int64) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id := range p.byItem {
		if !keep(id) {
			delete(p.byItem, id)
		}
	}
}

// observePayable feeds a published view to the tracker.
func (s *Server) observePayable(v order.View) {
	if v.Status != order.StatusPendingPayment {
		return
	}
	ci, _ := s.items.peek(v.ItemID)
	if ci == nil {
		return
	}
	s.payable.observe(v, time.Duration(ci.it.PaymentTimeoutSeconds)*time.Second)
}
