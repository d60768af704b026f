package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// Item statuses.
const (
	ItemUpcoming = "UPCOMING"
	ItemActive   = "ACTIVE"
	ItemSoldOut  = "SOLD_OUT"
	ItemEnded    = "ENDED"
)

// ItemView is the item JSON.
type ItemView struct {
	ID                    int64     `json:"id"`
	Name                  string    `json:"name"`
	PriceCents            int64     `json:"price_cents"`
	StockTotal            int64     `json:"stock_total"`
	StockLeft             int64     `json:"stock_left"`
	StartAt               time.Time `json:"start_at"`
	EndAt                 time.Time `json:"end_at"`
	PaymentTimeoutSeconds int       `json:"payment_timeout_seconds"`
	Status                string    `json:"status"`
}

func itemView(it store.Item, left int64, now time.Time) ItemView {
	status := ItemActive
	switch {
	case now.Before(it.StartAt):
		status = ItemUpcoming
	case !now.Before(it.EndAt):
		status = ItemEnded
	case left <= 0:
		status = ItemSoldOut
	}
	return ItemView{ID: it.ID, Name: it.Name, PriceCents: it.PriceCents, StockTotal: it.StockTotal,
		StockLeft: left, StartAt: it.StartAt.UTC(), EndAt: it.EndAt.UTC(),
		PaymentTimeoutSeconds: it.PaymentTimeoutSeconds, Status: status}
}

// Limits of item creation.
const (
	maxNameChars          = 200
	maxStock              = 10_000_000
	minPaymentTimeout     = 5
	maxPaymentTimeout     = 86_400
	defaultPaymentTimeout = 900
)

// createItemRequest uses raw fields so that every bad field can be named,
// including one of the wrong JSON type.
type createItemRequest struct {
	Name                  json.RawMessage `json:"name"`
	PriceCents            json.RawMessage `json:"price_cents"`
	StockTotal            json.RawMessage `json:"stock_total"`
	Stock                 json.RawMessage `json:"stock"` // alias of stock_total
	StartAt               json.RawMessage `json:"start_at"`
	EndAt                 json.RawMessage `json:"end_at"`
	PaymentTimeoutSeconds json.RawMessage `json:"payment_timeout_seconds"`
}

// validationErrors collects one message per bad field.
type validationErrors []string

func (v *validationErrors) add(field, msg string) { *v = append(*v, field+": "+msg) }

func present(raw json.RawMessage) bool { return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) }

func decodeInt(raw json.RawMessage, field string, errs *validationErrors) (int64, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var num json.Number
	if err := dec.Decode(&num); err != nil {
		errs.add(field, "must be an integer")
		return 0, false
	}
	n, err := num.Int64()
	if err != nil {
		errs.add(field, "must be an integer")
		return 0, false
	}
	return n, true
}

func decodeTime(raw json.RawMessage, field string, errs *validationErrors) (time.Time, bool) {
	var s string
	if !present(raw) {
		errs.add(field, "is required (RFC 3339)")
		return time.Time{}, false
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		errs.add(field, "must be an RFC 3339 string")
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		errs.add(field, "must be an RFC 3339 time such as 2030-01-02T15:04:05Z")
		return time.Time{}, false
	}
	t = t.UTC().Truncate(time.Millisecond) // DATETIME(3)
	if t.Year() < 1970 || t.Year() > 9998 {
		errs.add(field, "must be between years 1970 and 9998")
		return time.Time{}, false
	}
	return t, true
}

// parseCreateItem validates the body and names every bad field.
func parseCreateItem(body []byte) (store.Item, error) {
	var req createItemRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return store.Item{}, badRequest("body must be a JSON object with name, price_cents, stock_total, start_at, end_at")
	}
	var errs validationErrors
	var it store.Item

	var name string
	switch {
	case !present(req.Name):
		errs.add("name", "is required")
	case json.Unmarshal(req.Name, &name) != nil:
		errs.add("name", "must be a string")
	default:
		n := utf8.RuneCountInString(name)
		switch {
		case !utf8.ValidString(name) || strings.ContainsRune(name, 0):
			errs.add("name", "must be valid UTF-8 text")
		case strings.TrimSpace(name) == "" || n > maxNameChars:
			errs.add("name", fmt.Sprintf("must be 1-%d characters", maxNameChars))
		}
		it.Name = name
	}

	if !present(req.PriceCents) {
		errs.add("price_cents", "is required")
	} else if p, ok := decodeInt(req.PriceCents, "price_cents", &errs); ok {
		if p < 0 {
			errs.add("price_cents", "must be >= 0")
		}
		it.PriceCents = p
	}

	stockRaw, stockField := req.StockTotal, "stock_total"
	if !present(stockRaw) && present(req.Stock) {
		stockRaw, stockField = req.Stock, "stock"
	}
	if !present(stockRaw) {
		errs.add("stock_total", "is required")
	} else if n, ok := decodeInt(stockRaw, stockField, &errs); ok {
		if n < 1 || n > maxStock {
			errs.add(stockField, fmt.Sprintf("must be between 1 and %d", maxStock))
		}
		it.StockTotal = n
	}

	start, okStart := decodeTime(req.StartAt, "start_at", &errs)
	end, okEnd := decodeTime(req.EndAt, "end_at", &errs)
	if okStart && okEnd && !start.Before(end) {
		errs.add("end_at", "must be after start_at")
	}
	it.StartAt, it.EndAt = start, end

	it.PaymentTimeoutSeconds = defaultPaymentTimeout
	if present(req.PaymentTimeoutSeconds) {
		if n, ok := decodeInt(req.PaymentTimeoutSeconds, "payment_timeout_seconds", &errs); ok {
			if n < minPaymentTimeout || n > maxPaymentTimeout {
				errs.add("payment_timeout_seconds", fmt.Sprintf("must be between %d and %d", minPaymentTimeout, maxPaymentTimeout))
			}
			it.PaymentTimeoutSeconds = int(n)
		}
	}
	if len(errs) > 0 {
		return store.Item{}, badRequest(strings.Join(errs, "; "))
	}
	return it, nil
}

// POST /api/v1/items (admin)
func (s *Server) createItem(c *gin.Context) {
	if _, ok := s.requireRole(c, auth.RoleAdmin); !ok {
		return
	}
	body, ok := s.readBody(c)
	if !ok {
		return
	}
	it, err := parseCreateItem(body)
	if err != nil {
		s.fail(c, err)
		return
	}
	ctx := c.Request.Context()
	created, err := s.deps.Items.CreateItem(ctx, it)
	if err != nil {
		s.fail(c, err)
		return
	}
	ci := s.items.replace(created, -1)
	_ = s.announce(ctx, created.ID, false, "") // the others' item sync catches up if this fails
	if _, err := s.units.Load(ctx, created.ID, created.StockTotal); err != nil {
		s.log.Warn("item created but stock not loaded", "item_id", created.ID, "err", err)
		s.fail(c, &Error{Status: http.StatusServiceUnavailable, Code: ErrUnavailable.Code,
			Message: fmt.Sprintf("item %d was created but its stock could not be loaded into Redis; retry POST /api/v1/items/%d/warmup", created.ID, created.ID)})
		return
	}
	left := s.liveLeft(c, ci)
	c.JSON(http.StatusCreated, itemView(created, left, s.now()))
}

// liveLeft reads stock_left from Redis, falling back to the cached value
// when Redis cannot answer.
func (s *Server) liveLeft(c *gin.Context, ci *cachedItem) int64 {
	n, err := s.units.Left(c.Request.Context(), ci.it.ID)
	switch {
	case err == nil:
		ci.left.Store(n)
		ci.soldOut.Store(n <= 0)
		return n
	case errors.Is(err, stock.ErrNotLoaded):
		return ci.it.StockTotal // not warmed up yet: nothing reserved
	}
	if n := ci.left.Load(); n >= 0 {
		return n
	}
	return ci.it.StockTotal
}

// GET /api/v1/items/:id (anyone; per-IP limit)
func (s *Server) getItem(c *gin.Context) {
	id, ok := parseID(c.Param("id"))
	if !ok {
		s.fail(c, badRequest("id: must be a positive integer"))
		return
	}
	if !s.allowIP(c) {
		return
	}
	ci, err := s.items.get(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, itemView(ci.it, s.liveLeft(c, ci), s.now()))
}

// adminItemID reads the :id of an admin item route and checks the caller is
// an admin, answering 400 or 401/403 itself when not (the id first, as
// every such route did).
func (s *Server) adminItemID(c *gin.Context) (int64, bool) {
	id, ok := parseID(c.Param("id"))
	if !ok {
		s.fail(c, badRequest("id: must be a positive integer"))
		return 0, false
	}
	if _, ok := s.requireRole(c, auth.RoleAdmin); !ok {
		return 0, false
	}
	return id, true
}

// POST /api/v1/items/:id/warmup (admin): loads the stock into Redis unless
// it is already there (never overwrites live stock).
func (s *Server) warmup(c *gin.Context) {
	id, ok := s.adminItemID(c)
	if !ok {
		return
	}
	ci, err := s.items.get(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return
	}
	if err := s.warm(c.Request.Context(), ci); err != nil {
		s.fail(c, err)
		return
	}
	c.JSON(http.StatusOK, itemView(ci.it, s.liveLeft(c, ci), s.now()))
}

// warm loads the item's stock key if Redis lost it: the stock row minus the
// live reservations not deducted yet, computed while the stock row is held
// still (no deduction or restore commits meanwhile) and counted in Redis in
// one script (no reservation or release slips in). stock_total would sell
// again every unit reserved or sold before the loss.
func (s *Server) warm(ctx context.Context, ci *cachedItem) error {
	if s.deps.Stock == nil {
		_, err := s.units.Load(ctx, ci.it.ID, ci.it.StockTotal)
		return err
	}
	_, err := s.deps.Stock.FenceStock(ctx, ci.it.ID, store.Stock{Version: -1}, nil, func(row store.Stock, deducted []string) error {
		_, _, err := s.units.Warm(ctx, ci.it.ID, row.Stock, deducted)
		return err
	})
	return err
}
