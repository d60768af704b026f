package sale

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

const (
	ItemUpcoming = "UPCOMING"
	ItemActive   = "ACTIVE"
	ItemSoldOut  = "SOLD_OUT"
	ItemEnded    = "ENDED"
)

// ItemView is an item as the API shows it.
type ItemView struct {
	store.Item
	StockLeft int64  `json:"stock_left"`
	Status    string `json:"status"`
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
	it.StartAt, it.EndAt = it.StartAt.UTC(), it.EndAt.UTC()
	return ItemView{Item: it, StockLeft: left, Status: status}
}

const (
	maxNameChars          = 200
	maxStock              = 10_000_000
	minPaymentTimeout     = 5
	maxPaymentTimeout     = 86_400
	defaultPaymentTimeout = 900
)

// createItemRequest has raw fields so that every bad field can be named.
type createItemRequest struct {
	Name                  json.RawMessage `json:"name"`
	PriceCents            json.RawMessage `json:"price_cents"`
	StockTotal            json.RawMessage `json:"stock_total"`
	Stock                 json.RawMessage `json:"stock"` // alias of stock_total
	StartAt               json.RawMessage `json:"start_at"`
	EndAt                 json.RawMessage `json:"end_at"`
	PaymentTimeoutSeconds json.RawMessage `json:"payment_timeout_seconds"`
	Currency              json.RawMessage `json:"currency"`
}

type validationErrors []string

func (v *validationErrors) add(field, msg string) { *v = append(*v, field+": "+msg) }

func present(raw json.RawMessage) bool { return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) }

// integer decodes an integer field into dst (left alone when absent),
// checking it is in lo..hi (hi 0: no upper bound).
func (v *validationErrors) integer(raw json.RawMessage, field string, required bool, lo, hi int64, dst *int64) {
	var n int64
	switch {
	case !present(raw):
		if required {
			v.add(field, "is required")
		}
		return
	case json.Unmarshal(raw, &n) != nil:
		v.add(field, "must be an integer")
	case hi == 0 && n < lo:
		v.add(field, fmt.Sprintf("must be >= %d", lo))
	case hi > 0 && (n < lo || n > hi):
		v.add(field, fmt.Sprintf("must be between %d and %d", lo, hi))
	}
	*dst = n
}

// instant decodes a required RFC 3339 field, at DATETIME(3)'s precision.
func (v *validationErrors) instant(raw json.RawMessage, field string) (time.Time, bool) {
	var s string
	var t time.Time
	var err error
	switch {
	case !present(raw):
		v.add(field, "is required (RFC 3339)")
	case json.Unmarshal(raw, &s) != nil:
		v.add(field, "must be an RFC 3339 string")
	default:
		if t, err = time.Parse(time.RFC3339, s); err != nil {
			v.add(field, "must be an RFC 3339 time such as 2030-01-02T15:04:05Z")
		} else if t = t.UTC().Truncate(time.Millisecond); t.Year() < 1970 || t.Year() > 9998 {
			v.add(field, "must be between years 1970 and 9998")
		} else {
			return t, true
		}
	}
	return time.Time{}, false
}

func parseCreateItem(req createItemRequest, currency string) (store.Item, error) {
	var errs validationErrors
	it := store.Item{Currency: currency}
	if present(req.Currency) && (json.Unmarshal(req.Currency, &it.Currency) != nil || !isCurrency(it.Currency)) {
		errs.add("currency", "must be an ISO 4217 code in upper case, such as EUR")
	}
	switch {
	case !present(req.Name):
		errs.add("name", "is required")
	case json.Unmarshal(req.Name, &it.Name) != nil:
		errs.add("name", "must be a string")
	case !utf8.ValidString(it.Name) || strings.ContainsRune(it.Name, 0):
		errs.add("name", "must be valid UTF-8 text")
	case strings.TrimSpace(it.Name) == "" || utf8.RuneCountInString(it.Name) > maxNameChars:
		errs.add("name", fmt.Sprintf("must be 1-%d characters", maxNameChars))
	}
	errs.integer(req.PriceCents, "price_cents", true, 0, 0, &it.PriceCents)
	stockRaw, stockField := req.StockTotal, "stock_total"
	if !present(stockRaw) && present(req.Stock) {
		stockRaw, stockField = req.Stock, "stock"
	}
	errs.integer(stockRaw, stockField, true, 1, maxStock, &it.StockTotal)
	start, okStart := errs.instant(req.StartAt, "start_at")
	end, okEnd := errs.instant(req.EndAt, "end_at")
	if okStart && okEnd && !start.Before(end) {
		errs.add("end_at", "must be after start_at")
	}
	it.StartAt, it.EndAt = start, end
	timeout := int64(defaultPaymentTimeout)
	errs.integer(req.PaymentTimeoutSeconds, "payment_timeout_seconds", false, minPaymentTimeout, maxPaymentTimeout, &timeout)
	it.PaymentTimeoutSeconds = int(timeout)
	if len(errs) > 0 {
		return store.Item{}, apierr.BadRequest(strings.Join(errs, "; "))
	}
	return it, nil
}

// POST /api/v1/items (admin)
func (s *Sale) createItem(c *gin.Context) error {
	if _, err := s.d.Auth(c, auth.RoleAdmin); err != nil {
		return err
	}
	var req createItemRequest
	if err := apierr.ReadJSON(c, &req, "body must be a JSON object with name, price_cents, stock_total, start_at, end_at"); err != nil {
		return err
	}
	it, err := parseCreateItem(req, s.d.Currency)
	ctx := c.Request.Context()
	if err == nil {
		it, err = s.d.Catalog.CreateItem(ctx, it)
	}
	if err != nil {
		return err
	}
	ci, _ := s.changed(ctx, it, false)
	if _, err := s.d.Loader.Load(ctx, it.ID, it.StockTotal); err != nil {
		s.log.Warn("item created but stock not loaded", "item_id", it.ID, "err", err)
		return apierr.ErrUnavailable.With(fmt.Sprintf("item %d was created but its stock could not be loaded into Redis; retry POST /api/v1/items/%d/warmup", it.ID, it.ID))
	}
	return s.writeItem(c, http.StatusCreated, ci)
}

func (s *Sale) writeItem(c *gin.Context, status int, ci *Entry) error {
	c.JSON(status, itemView(ci.it, s.lefts(c.Request.Context(), ci)[0], s.d.Now()))
	return nil
}

// lefts reads the items' stock_left from Redis: stock_total when not
// loaded, the cached figure when Redis cannot answer.
func (s *Sale) lefts(ctx context.Context, cis ...*Entry) []int64 {
	live, err := s.d.Live.LeftMany(ctx, itemIDs(cis))
	if err != nil {
		s.log.Debug("stock_left from redis", "err", err)
	}
	out := make([]int64, len(cis))
	for i, ci := range cis {
		n, ok := live[ci.it.ID]
		switch {
		case ok:
			s.items.setLeft(ci, n, -1)
		case err == nil || ci.left.Load() < 0:
			n = ci.it.StockTotal
		default:
			n = ci.left.Load()
		}
		out[i] = n
	}
	return out
}

// listLeftPeriod is how old a stock_left the item list serves: storefronts
// poll the list each second, and the hot item's shard must not answer each.
const listLeftPeriod = time.Second

// cachedLefts is the items' stock_left as last read (readLefts), or
// stock_total when unknown.
func (s *Sale) cachedLefts(ctx context.Context, cis ...*Entry) []int64 {
	if err := s.items.readLefts(ctx, cis, listLeftPeriod); err != nil {
		s.log.Debug("stock_left from redis", "err", err)
	}
	out := make([]int64, len(cis))
	for i, ci := range cis {
		if out[i] = ci.left.Load(); out[i] < 0 {
			out[i] = ci.it.StockTotal
		}
	}
	return out
}

// itemID is the :id of an item route, after the role's check, or the
// per-IP limit when role is "".
func (s *Sale) itemID(c *gin.Context, role auth.Role) (int64, error) {
	id, ok := apierr.ParseID(c.Param("id"))
	if !ok {
		return 0, apierr.BadRequest("id: must be a positive integer")
	}
	if role == "" {
		return id, s.d.AllowIP(c)
	}
	_, err := s.d.Auth(c, role)
	return id, err
}

// GET /api/v1/items/:id (anyone; per-IP limit)
func (s *Sale) getItem(c *gin.Context) error { return s.showItem(c, "", nil) }

// POST /api/v1/items/:id/warmup (admin)
func (s *Sale) warmup(c *gin.Context) error { return s.showItem(c, auth.RoleAdmin, s.warm) }

// showItem answers the :id item, after then (if set).
func (s *Sale) showItem(c *gin.Context, role auth.Role, then func(context.Context, *Entry) error) error {
	id, err := s.itemID(c, role)
	var ci *Entry
	if err == nil {
		ci, err = s.items.Get(c.Request.Context(), id)
	}
	if err == nil && then != nil {
		err = then(c.Request.Context(), ci)
	}
	if err != nil {
		return err
	}
	return s.writeItem(c, http.StatusOK, ci)
}

// warm loads the item's stock key if Redis lost it (a loaded key is never
// touched): first the orders MySQL says hold a unit get their reservations
// back (a QUEUED one, not deducted yet, would otherwise sell again), then the
// key is counted from the stock row, held still meanwhile
// (docs/design.md).
func (s *Sale) warm(ctx context.Context, ci *Entry) error {
	id := ci.it.ID
	_, err := s.d.Rows.FenceStock(ctx, id, store.Stock{Version: -1}, nil, func(row store.Stock, deducted []string) error {
		// Under the fence nothing else loads the key.
		left, err := s.d.Live.LeftMany(ctx, []int64{id})
		if _, loaded := left[id]; err != nil || loaded {
			return err
		}
		held, err := s.d.Rows.HeldOrders(ctx, id)
		if err != nil {
			return err
		}
		ms := make([]order.Message, len(held))
		for i, o := range held {
			ms[i] = o.Reservation()
		}
		n, err := s.d.Loader.RestoreAll(ctx, id, ms)
		if err != nil {
			return err
		}
		_, want, err := s.d.Loader.Recount(ctx, id, row.Stock, deducted, stock.Warm)
		if err == nil {
			s.log.Info("stock loaded into redis", "item_id", id, "stock_left", want, "stock_row", row.Stock,
				"orders_holding_units", len(held), "reservations_put_back", n)
		}
		return err
	})
	return err
}

// endedShown is how long after its end a sale is still listed.
const endedShown = time.Hour

// parseStatuses reads ?status= (a comma list, any case); nil: every status.
func parseStatuses(c *gin.Context) (map[string]bool, error) {
	raw, ok := c.GetQuery("status")
	if !ok {
		return nil, nil
	}
	want := map[string]bool{}
	for _, v := range strings.Split(raw, ",") {
		v = strings.ToUpper(strings.TrimSpace(v))
		if !slices.Contains([]string{ItemUpcoming, ItemActive, ItemSoldOut, ItemEnded}, v) {
			return nil, apierr.BadRequest("status: must be one of UPCOMING, ACTIVE, SOLD_OUT, ENDED (or a comma list of them)")
		}
		want[v] = true
	}
	return want, nil
}

// GET /api/v1/items (anyone; per-IP limit), ?status=: the shown sales by
// start_at, then id.
func (s *Sale) listItems(c *gin.Context) error {
	want, err := parseStatuses(c)
	if err != nil {
		return err
	}
	if err := s.d.AllowIP(c); err != nil {
		return err
	}
	now := s.d.Now()
	shown := s.items.all(endedShown, now)
	views := make([]ItemView, 0, len(shown))
	for i, left := range s.cachedLefts(c.Request.Context(), shown...) {
		if v := itemView(shown[i].it, left, now); want == nil || want[v.Status] {
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(a, b ItemView) int {
		return cmp.Or(a.StartAt.Compare(b.StartAt), cmp.Compare(a.ID, b.ID))
	})
	c.JSON(http.StatusOK, gin.H{"items": views})
	return nil
}

// isCurrency: three upper-case letters (ISO 4217's form).
func isCurrency(c string) bool {
	return len(c) == 3 && !strings.ContainsFunc(c, func(r rune) bool { return r < 'A' || r > 'Z' })
}
