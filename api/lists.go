package api

import (
	"cmp"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/oklog/ulid/v2"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// endedShown is how long after its end a sale is still listed by
// GET /api/v1/items and the control room's summary.
const endedShown = time.Hour

type itemList struct {
	Items []ItemView `json:"items"`
}

// parseStatuses reads ?status= (one status or a comma list, any case); nil
// means every status.
func parseStatuses(c *gin.Context) (map[string]bool, error) {
	raw, ok := c.GetQuery("status")
	if !ok {
		return nil, nil
	}
	want := map[string]bool{}
	for _, v := range strings.Split(raw, ",") {
		v = strings.ToUpper(strings.TrimSpace(v))
		if !slices.Contains([]string{ItemUpcoming, ItemActive, ItemSoldOut, ItemEnded}, v) {
			return nil, badRequest("status: must be one of UPCOMING, ACTIVE, SOLD_OUT, ENDED (or a comma list of them)")
		}
		want[v] = true
	}
	return want, nil
}

// GET /api/v1/items (anyone; per-IP limit), ?status= filters
//
// The sales upcoming or active, and those that ended within the last hour,
// each as GET /api/v1/items/:id shows it, ordered by start_at, then id. The
// sale data comes from this instance's item cache, stock_left from Redis in
// one pipeline.
func (s *Server) listItems(c *gin.Context) {
	want, err := parseStatuses(c)
	if err != nil {
		s.fail(c, err)
		return
	}
	if !s.allowIP(c) {
		return
	}
	now := s.now()
	shown := s.items.all(endedShown, now)
	out := itemList{Items: make([]ItemView, 0, len(shown))}
	for i, left := range s.lefts(c.Request.Context(), shown...) {
		if v := itemView(shown[i].it, left, now); want == nil || want[v.Status] {
			out.Items = append(out.Items, v)
		}
	}
	slices.SortFunc(out.Items, func(a, b ItemView) int {
		if c := a.StartAt.Compare(b.StartAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	c.JSON(http.StatusOK, out)
}

// Limits of GET /api/v1/orders.
const (
	defaultOrderPage = 20
	maxOrderPage     = 100
	// markWindow is how long after a sale's end the buyer marks of its item
	// are read for a buyer's order list: an order lives only in Redis until
	// its saga persists it, which takes at most as long as the queue keeps
	// retrying (days at worst, with Temporal down); the QUEUED view of such
	// an order lives as long (orderstatus.TTL).
	markWindow = 7 * 24 * time.Hour
)

type orderList struct {
	Orders     []order.View `json:"orders"`
	NextCursor *string      `json:"next_cursor"`
}

// GET /api/v1/orders (buyer), ?limit= (1-100, default 20), ?cursor=
//
// The caller's orders, newest first (order ids are ULIDs, ordered by
// creation time); each entry is the view GET /api/v1/orders/:id gives. An
// order still QUEUED lives only in Redis until its saga persists it: the
// buyer's marks (one HGET per item whose sale ended less than markWindow
// ago, one pipeline) name those, and their views come from Redis; every
// other order is a row in MySQL (one keyset query). next_cursor is null on
// the last page; otherwise pass it as ?cursor= for the next one.
func (s *Server) listOrders(c *gin.Context) {
	p, ok := s.requireRole(c, auth.RoleBuyer)
	if !ok {
		return
	}
	limit := defaultOrderPage
	if raw, ok := c.GetQuery("limit"); ok {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > maxOrderPage {
			s.fail(c, badRequest("limit: must be an integer between 1 and 100"))
			return
		}
		limit = n
	}
	cursor, hasCursor := c.GetQuery("cursor")
	if hasCursor && !order.ValidID(cursor) {
		s.fail(c, badRequest("cursor: must be a next_cursor of an earlier page"))
		return
	}
	ctx := c.Request.Context()
	now := s.now()

	marks, err := s.units.BuyerOrders(ctx, itemIDs(s.items.all(markWindow, now)), p.UserID)
	if err != nil {
		// The persisted orders can still be listed; only one not persisted
		// yet is missing until Redis answers again.
		s.log.Warn("list orders: buyer marks from redis", "user_id", p.UserID, "err", err)
	}
	rows, err := s.deps.Orders.ListUserOrders(ctx, p.UserID, cursor, limit+1)
	if err != nil {
		s.fail(c, err)
		return
	}
	views := make([]order.View, 0, len(rows)+len(marks))
	listed := make(map[string]bool, len(rows))
	for _, o := range rows {
		views = append(views, o.View())
		listed[o.OrderID] = true
	}
	unlisted := make(map[string]int64) // order id -> item
	for item, id := range marks {
		if !listed[id] && (cursor == "" || id < cursor) {
			unlisted[id] = item
		}
	}
	if len(unlisted) > 0 {
		// A marked order outside this page's rows is either a row on
		// another page or not persisted yet.
		persisted, err := s.deps.Orders.FindOrders(ctx, slices.Collect(maps.Keys(unlisted)))
		if err != nil {
			s.fail(c, err)
			return
		}
		for id, item := range unlisted {
			if _, ok := persisted[id]; ok {
				continue
			}
			v, ok, err := s.views.Status(ctx, id)
			if err != nil || !ok || v.UserID != p.UserID {
				// Its view is gone or unreadable: what the mark says.
				v = order.View{OrderID: id, ItemID: item, UserID: p.UserID, Status: order.StatusQueued}
				if u, err := ulid.ParseStrict(id); err == nil {
					v.CreatedAt = ulid.Time(u.Time()).UTC()
					v.UpdatedAt = v.CreatedAt
				}
			}
			views = append(views, v)
		}
	}
	slices.SortFunc(views, func(a, b order.View) int { return strings.Compare(b.OrderID, a.OrderID) })
	out := orderList{Orders: views}
	if len(views) > limit {
		next := views[limit-1].OrderID
		out.Orders, out.NextCursor = views[:limit], &next
	}
	c.JSON(http.StatusOK, out)
}
