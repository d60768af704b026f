package controlroom

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// One reading of the figures serves every admin poll for summaryTTL; it
// lists the newest summaryMaxItems sales.
const (
	summaryTTL      = 500 * time.Millisecond
	summaryMaxItems = 100
)

// SaleSummary is one sale in the control room (docs/openapi.yaml).
type SaleSummary struct {
	Item          any                    `json:"item"`
	UnitsLeft     *int64                 `json:"units_left"`
	Accepted      int64                  `json:"accepted"`
	Orders        map[order.Status]int64 `json:"orders"`
	Payable       PayableLatency         `json:"payable"`
	OutboxBacklog int64                  `json:"outbox_backlog"`
	// Money per currency: captured, refunded, refunds asked and not confirmed.
	Money    []store.Money `json:"money"`
	SagasURL string        `json:"sagas_url,omitempty"`
}

// PayableLatency summarises 202 -> first accepted pay.
type PayableLatency struct {
	Count int64    `json:"count"`
	P50MS *float64 `json:"p50_ms"`
	P99MS *float64 `json:"p99_ms"`
}

type summaryBody struct {
	ServerTime time.Time     `json:"server_time"`
	ReadAt     time.Time     `json:"read_at"`
	TemporalUI string        `json:"temporal_ui,omitempty"`
	Sales      []SaleSummary `json:"sales"`
}

// GET /api/v1/admin/summary (admin): the figures of the shown sales.
func (rm *Room) adminSummary(c *gin.Context) {
	if body, ok := reuse(rm, c, &rm.sums, summaryTTL, rm.readSummary); ok {
		body.ServerTime = rm.d.Now().UTC()
		c.JSON(http.StatusOK, body)
	}
}

// reuse is read's answer, read at most once per ttl whatever the number of
// callers; false: the error is answered.
func reuse[T any](rm *Room, c *gin.Context, r *apierr.Reused[T], ttl time.Duration, read func(context.Context) (T, error)) (T, bool) {
	body, err := r.Get(rm.d.Now, ttl, func() (T, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), 2*time.Second)
		defer cancel()
		return read(ctx)
	})
	if err != nil {
		rm.d.Fail(c, err)
		return body, false
	}
	c.Header("Cache-Control", "no-store")
	return body, true
}

func (rm *Room) readSummary(ctx context.Context) (summaryBody, error) {
	now := rm.d.Now()
	sales := rm.d.Items.Shown(now)
	slices.SortFunc(sales, func(a, b store.Item) int { return cmp.Compare(b.ID, a.ID) }) // newest first
	sales = sales[:min(len(sales), summaryMaxItems)]
	ids := make([]int64, len(sales))
	for i, it := range sales {
		ids[i] = it.ID
	}
	figs, err := rm.d.Pulses.Pulses(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	counts, err := rm.d.Orders.CountOrders(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	money, err := rm.d.Orders.SaleMoney(ctx, ids)
	if err != nil {
		return summaryBody{}, err
	}
	b := summaryBody{ReadAt: now.UTC(), TemporalUI: rm.temporalUI, Sales: make([]SaleSummary, 0, len(sales))}
	for _, it := range sales {
		f, left := figs[it.ID], it.StockTotal
		ss := SaleSummary{Accepted: f.Marks, Payable: rm.firstPayLatency(it.ID), OutboxBacklog: f.Outbox, Money: money[it.ID],
			Orders: map[order.Status]int64{order.StatusPendingPayment: 0, order.StatusPaid: 0, order.StatusCancelled: 0, order.StatusFailed: 0}}
		if f.Loaded {
			left, ss.UnitsLeft = f.Left, &f.Left
		}
		ss.Item = rm.d.Items.View(it, left, now)
		var beyondQueued int64
		for st, n := range counts[it.ID] {
			if st != order.StatusQueued {
				ss.Orders[st] = n
				beyondQueued += n
			}
		}
		ss.Orders[order.StatusQueued] = max(f.Marks-beyondQueued, counts[it.ID][order.StatusQueued])
		ss.SagasURL = rm.d.Temporal.WorkflowsURL(fmt.Sprintf("SeckillItemId=%d", it.ID))
		if ss.Money == nil {
			ss.Money = []store.Money{}
		}
		b.Sales = append(b.Sales, ss)
	}
	return b, nil
}

// firstPays are the orders whose first pay was counted, per item (the saga
// may publish a PAID view again later).
type firstPays struct {
	mu     sync.Mutex
	byItem map[int64]map[string]struct{}
}

// ObserveFirstPay records an order's first PAID view: from its 202 (the id's
// time) to the door's decision (UpdatedAt).
func (rm *Room) ObserveFirstPay(v order.View) {
	if v.Status != order.StatusPaid || v.UpdatedAt.IsZero() {
		return
	}
	accepted := order.IDTime(v.OrderID, time.Time{})
	if !rm.d.Items.Known(v.ItemID) || accepted.IsZero() {
		return
	}
	p := &rm.paid
	p.mu.Lock()
	defer p.mu.Unlock()
	seen := p.byItem[v.ItemID]
	if seen == nil {
		seen = make(map[string]struct{})
		p.byItem[v.ItemID] = seen
	}
	if _, ok := seen[v.OrderID]; ok {
		return
	}
	seen[v.OrderID] = struct{}{}
	rm.d.FirstPay.WithLabelValues(strconv.FormatInt(v.ItemID, 10)).Observe(max(v.UpdatedAt.Sub(accepted), 0).Seconds())
}

// firstPayLatency returns an item's count, p50 and p99 in ms (interpolated
// as histogram_quantile does).
func (rm *Room) firstPayLatency(itemID int64) PayableLatency {
	rm.paid.mu.Lock()
	counted := len(rm.paid.byItem[itemID]) > 0
	rm.paid.mu.Unlock()
	if !counted {
		return PayableLatency{} // no series: none is made for a read
	}
	obs, err := rm.d.FirstPay.GetMetricWithLabelValues(strconv.FormatInt(itemID, 10))
	var m dto.Metric
	if err != nil || obs.(prometheus.Metric).Write(&m) != nil || m.Histogram.GetSampleCount() == 0 {
		return PayableLatency{}
	}
	h := m.Histogram
	q := func(f float64) *float64 {
		rank := f * float64(h.GetSampleCount())
		lower, below := 0.0, 0.0
		for _, b := range h.Bucket {
			if n := float64(b.GetCumulativeCount()); n >= rank {
				sec := lower + (b.GetUpperBound()-lower)*(rank-below)/max(n-below, 1)
				ms := math.Round(sec*1e4) / 10
				return &ms
			}
			lower, below = b.GetUpperBound(), float64(b.GetCumulativeCount())
		}
		ms := math.Round(lower*1e4) / 10 // past the last bucket: its bound
		return &ms
	}
	return PayableLatency{Count: int64(h.GetSampleCount()), P50MS: q(0.50), P99MS: q(0.99)}
}

// ForgetFirstPays drops the series of items no longer shown at now.
func (rm *Room) ForgetFirstPays(now time.Time) {
	shown := make(map[int64]bool)
	for _, it := range rm.d.Items.Shown(now) {
		shown[it.ID] = true
	}
	rm.paid.mu.Lock()
	defer rm.paid.mu.Unlock()
	for id := range rm.paid.byItem {
		if !shown[id] {
			delete(rm.paid.byItem, id)
			rm.d.FirstPay.DeleteLabelValues(strconv.FormatInt(id, 10))
		}
	}
}
