package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"math"
	"mime"
	"net/http"
	"net/url"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// page is one embedded file of package web, read into memory at start.
type page struct {
	body        []byte
	contentType string
	etag        string
}

func loadPages(fsys fs.FS) map[string]page {
	out := make(map[string]page)
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = "application/octet-stream"
		}
		sum := sha256.Sum256(b)
		out[p] = page{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	return out
}

// contentSecurity keeps the pages to their own origin: scripts and styles
// only from the embedded files, requests only to this API, no framing.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"

// writePage answers one embedded file. Pages are revalidated on every load
// (no-cache with an ETag): a new binary is seen at once, an unchanged file
// costs a 304.
func (s *Server) writePage(c *gin.Context, name string) {
	p, ok := s.pages[name]
	if !ok {
		s.fail(c, ErrNoRoute)
		return
	}
	h := c.Writer.Header()
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", p.etag)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if strings.HasSuffix(name, ".html") {
		h.Set("Content-Security-Policy", contentSecurity)
	}
	if c.GetHeader("If-None-Match") == p.etag {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, p.contentType, p.body)
}

// GET /assets/*file: the pages' CSS and JavaScript.
func (s *Server) asset(c *gin.Context) {
	name := strings.TrimPrefix(c.Param("file"), "/")
	if name == "" || strings.Contains(name, "..") || strings.HasSuffix(name, ".html") {
		s.fail(c, ErrNoRoute)
		return
	}
	s.writePage(c, "assets/"+name)
}

// GET /api/v1/time (anyone; per-IP limit): the server's clock, which the
// pages count down against, not the browser's; dev says whether POST
// /api/v1/dev/token exists.
func (s *Server) serverTime(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"now": s.now().UTC(), "dev": s.deps.DevSecret != nil})
	return nil
}

// Development sign-in: user ids up to maxDevUser, tokens valid devTokenTTL.
const (
	maxDevUser  = 1_000_000_000
	devTokenTTL = 12 * time.Hour
)

// POST /api/v1/dev/token (development only; per-IP limit): a token for
// {"user_id": N, "role": "buyer"|"admin"} (role defaults to buyer).
func (s *Server) devToken(c *gin.Context) error {
	if err := s.allowIP(c); err != nil {
		return err
	}
	var req struct {
		UserID int64     `json:"user_id"`
		Role   auth.Role `json:"role"`
	}
	if err := readJSON(c, &req, `body must be {"user_id": N, "role": "buyer" or "admin"}`); err != nil {
		return err
	}
	if req.Role == "" {
		req.Role = auth.RoleBuyer
	}
	switch {
	case req.UserID < 1 || req.UserID > maxDevUser:
		return badRequest("user_id: must be between 1 and 1000000000")
	case req.Role != auth.RoleBuyer && req.Role != auth.RoleAdmin:
		return badRequest(`role: must be "buyer" or "admin"`)
	}
	now := time.Now()
	tok, err := auth.Sign(s.deps.DevSecret, req.UserID, req.Role, devTokenTTL, now)
	if err != nil {
		return err
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, gin.H{"token": tok, "user_id": req.UserID, "role": req.Role, "expires_at": now.Add(devTokenTTL).UTC()})
	return nil
}

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

// PayableLatency summarises 202 -> first accepted pay: what a buyer who pays
// at once waits for (the field keeps its name, "payable", in the JSON).
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
		ss := SaleSummary{Accepted: f.Marks, Payable: s.firstPayLatency(ci.it.ID), OutboxBacklog: f.Outbox,
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

// firstPays counts, per item, each order's first accepted pay once, from the
// order views every instance receives over pub/sub (no query): the door
// publishes a view when it accepts an order's first pay, and the saga may
// publish the PAID order again later. The latencies themselves are in
// Metrics' seckill_order_first_pay_seconds, which the control room reads.
type firstPays struct {
	mu     sync.Mutex
	byItem map[int64]map[string]struct{}
}

// observeFirstPay records an order's first PAID view: from its 202 (the order
// id's time) to the door's decision (the view's UpdatedAt, the row's write).
func (s *Server) observeFirstPay(v order.View) {
	if v.Status != order.StatusPaid || v.UpdatedAt.IsZero() {
		return
	}
	ci, _ := s.items.peek(v.ItemID)
	accepted := order.IDTime(v.OrderID, time.Time{})
	if ci == nil || accepted.IsZero() {
		return
	}
	p := &s.paid
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byItem == nil {
		p.byItem = make(map[int64]map[string]struct{})
	}
	seen := p.byItem[v.ItemID]
	if seen == nil {
		seen = make(map[string]struct{})
		p.byItem[v.ItemID] = seen
	}
	if _, ok := seen[v.OrderID]; ok {
		return
	}
	seen[v.OrderID] = struct{}{}
	s.metrics.firstPay.WithLabelValues(strconv.FormatInt(v.ItemID, 10)).Observe(max(v.UpdatedAt.Sub(accepted), 0).Seconds())
}

// firstPayLatency returns an item's count, p50 and p99 (in milliseconds, each
// interpolated within its bucket as histogram_quantile does) from its
// seckill_order_first_pay_seconds series.
func (s *Server) firstPayLatency(itemID int64) PayableLatency {
	s.paid.mu.Lock()
	counted := len(s.paid.byItem[itemID]) > 0
	s.paid.mu.Unlock()
	if !counted {
		return PayableLatency{} // no series: none is made for a read
	}
	obs, err := s.metrics.firstPay.GetMetricWithLabelValues(strconv.FormatInt(itemID, 10))
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

// forgetFirstPays drops the series of items no longer shown.
func (s *Server) forgetFirstPays(keep func(itemID int64) bool) {
	s.paid.mu.Lock()
	defer s.paid.mu.Unlock()
	for id := range s.paid.byItem {
		if !keep(id) {
			delete(s.paid.byItem, id)
			s.metrics.firstPay.DeleteLabelValues(strconv.FormatInt(id, 10))
		}
	}
}
