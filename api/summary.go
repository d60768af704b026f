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

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// One reading of the control room's figures (one pipelined Redis round trip,
// one index-only MySQL count) serves every admin poll for summaryTTL, however
// many control rooms are open; it lists the newest summaryMaxItems sales.
const (
	summaryTTL      = 500 * time.Millisecond
	summaryMaxItems = 100
)

// SaleSummary is one sale in the control room (docs/openapi.yaml says what
// each figure is).
type SaleSummary struct {
	Item          ItemView               `json:"item"`
	UnitsLeft     *int64                 `json:"units_left"`
	Accepted      int64                  `json:"accepted"`
	Orders        map[order.Status]int64 `json:"orders"`
	Payable       PayableLatency         `json:"payable"`
	OutboxBacklog int64                  `json:"outbox_backlog"`
	SagasURL      string                 `json:"sagas_url,omitempty"`
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

// reused holds the last result of an evaluation, errors included, until it
// is ttl old; callers wait on one evaluation instead of each starting one.
type reused[T any] struct {
	mu  sync.Mutex
	at  time.Time
	val T
	err error
}

func (r *reused[T]) get(now func() time.Time, ttl time.Duration, eval func() (T, error)) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now().Sub(r.at) >= ttl {
		r.val, r.err = eval()
		r.at = now()
	}
	return r.val, r.err
}

// GET /api/v1/admin/summary (admin): the control room's figures of every
// sale that is upcoming, open or ended within the last hour.
func (s *Server) adminSummary(c *gin.Context) error {
	if _, err := s.authenticate(c, auth.RoleAdmin); err != nil {
		return err
	}
	body, err := s.sums.get(s.now, summaryTTL, func() (summaryBody, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 2*time.Second)
		defer cancel()
		return s.readSummary(ctx)
	})
	if err != nil {
		return err
	}
	body.ServerTime = s.now().UTC()
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, body)
	return nil
}

// readSummary reads the figures of the sales this instance knows.
func (s *Server) readSummary(ctx context.Context) (summaryBody, error) {
	now := s.now()
	sales := s.items.all(endedShown, now)
	sort.Slice(sales, func(i, j int) bool { return sales[i].it.ID > sales[j].it.ID })
	sales = sales[:min(len(sales), summaryMaxItems)]
	ids := itemIDs(sales)
	figs, err := s.units.Pulses(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	counts, err := s.deps.Orders.CountOrders(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	b := summaryBody{ReadAt: now.UTC(), TemporalUI: s.temporalUI, Sales: make([]SaleSummary, 0, len(sales))}
	for _, ci := range sales {
		f, left := figs[ci.it.ID], ci.it.StockTotal
		ss := SaleSummary{Accepted: f.Marks, Payable: s.payable.latency(ci.it.ID), OutboxBacklog: f.Outbox,
			Orders: map[order.Status]int64{order.StatusPendingPayment: 0, order.StatusPaid: 0, order.StatusCancelled: 0, order.StatusFailed: 0}}
		if f.Loaded {
			left, ss.UnitsLeft = f.Left, &f.Left
		}
		ss.Item = itemView(ci.it, left, now)
		var beyondQueued int64
		for st, n := range counts[ci.it.ID] {
			if st != order.StatusQueued {
				ss.Orders[st] = n
				beyondQueued += n
			}
		}
		ss.Orders[order.StatusQueued] = max(f.Marks-beyondQueued, counts[ci.it.ID][order.StatusQueued])
		if s.temporalUI != "" {
			ss.SagasURL = s.temporalUI + "?query=" + url.QueryEscape(fmt.Sprintf("SeckillItemId=%d", ci.it.ID))
		}
		b.Sales = append(b.Sales, ss)
	}
	return b, nil
}

// payableTracker keeps, per item, a histogram of 202 -> payable from the
// order views every instance receives over pub/sub (no query): from the order
// id's time to pay_by minus the payment window, as the bench measures it.
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

// observePayable records an order the moment it is seen payable.
func (s *Server) observePayable(v order.View) {
	if v.Status != order.StatusPendingPayment || v.PayBy == nil {
		return
	}
	ci, _ := s.items.peek(v.ItemID)
	accepted := order.IDTime(v.OrderID, time.Time{})
	if ci == nil || accepted.IsZero() {
		return
	}
	window := time.Duration(ci.it.PaymentTimeoutSeconds) * time.Second
	d := v.PayBy.Add(-window).Sub(accepted)
	i := 0
	if d > time.Duration(histBase) {
		i = min(int(math.Ceil(math.Log(float64(d)/histBase)/math.Log(histGrowth))), histBuckets-1)
	}
	p := &s.payable
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byItem == nil {
		p.byItem = make(map[int64]*latencyHistogram)
	}
	h := p.byItem[v.ItemID]
	if h == nil {
		h = &latencyHistogram{}
		p.byItem[v.ItemID] = h
	}
	h.count++
	h.buckets[i]++
}

// latency returns p50 and p99 of an item (each the upper bound of its
// bucket, in milliseconds).
func (p *payableTracker) latency(itemID int64) PayableLatency {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.byItem[itemID]
	if h == nil {
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
