// Package orders is the buyer's orders: GET one, the list, the event stream
// of one, and the pay and cancel judged at the door.
package orders

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Rows are the persisted orders (store.Store).
type Rows interface {
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	ListUserOrders(ctx context.Context, userID int64, before string, limit int) ([]store.Order, error)
}

// Views are the orders' latest views in Redis (orderstatus.Board).
type Views interface {
	Status(ctx context.Context, orderID string) (order.View, bool, error)
}

// Marks are the buyers' marks in Redis (stock.Store).
type Marks interface {
	BuyerOrders(ctx context.Context, itemIDs []int64, userID int64) (map[int64]string, error)
}

// Items are the ids of the items in the sale's read model (sale.Cache).
type Items interface {
	IDs(endedWithin time.Duration, now time.Time) []int64
}

// Actions are the buyer's pay and cancel (payment.Desk).
type Actions interface {
	Pay(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error)
	Cancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error)
}

// Deps are what the order routes are built from. Actions is optional (pay
// and cancel then answer 503); Config gives the event streams' settings.
type Deps struct {
	Rows    Rows
	Views   Views
	Marks   Marks
	Items   Items
	Actions Actions
	Config  config.API
	Log     *slog.Logger
	Now     func() time.Time
	// The API's check (role "": any) and error answer.
	Auth func(c *gin.Context, role auth.Role) (auth.Principal, error)
	Fail func(c *gin.Context, err error)
}

// Orders serves the order routes.
type Orders struct {
	d       Deps
	log     *slog.Logger
	hub     *hub
	streams streamCounts
}

// Register adds the order routes to r.
func Register(r gin.IRoutes, d Deps) *Orders {
	s := &Orders{d: d, log: d.Log, hub: newHub()}
	h := func(fn func(c *gin.Context) error) gin.HandlerFunc { return apierr.Handle(d.Fail, fn) }
	r.GET("/api/v1/orders", h(s.listOrders))
	r.GET("/api/v1/orders/:orderId", h(s.getOrder))
	r.GET("/api/v1/orders/:orderId/events", h(s.events))
	r.POST("/api/v1/orders/:orderId/pay", h(s.pay))
	r.POST("/api/v1/orders/:orderId/cancel", h(s.cancel))
	return s
}

// Publish delivers an order's view to its event streams on this instance.
func (s *Orders) Publish(v order.View) { s.hub.publish(v) }

// lookupOrder returns the latest view of an order: Redis's, else the row.
func (s *Orders) lookupOrder(ctx context.Context, orderID string) (order.View, error) {
	v, ok, err := s.d.Views.Status(ctx, orderID)
	if err == nil && ok && !s.stale(v) {
		return v, nil
	}
	if err != nil {
		s.log.Debug("order status from redis", "order_id", orderID, "err", err)
	}
	o, dbErr := s.d.Rows.FindOrder(ctx, orderID)
	switch {
	case dbErr == nil:
		return s.withRefund(ctx, o.View()), nil
	case ok:
		return v, nil // a stale view is better than none (no row yet, or MySQL down)
	case errors.Is(dbErr, order.ErrNotFound) && err != nil:
		return order.View{}, err // Redis down and no row: cannot tell
	}
	return order.View{}, dbErr
}

// refunds is store.Store's: the refunds of an order (a Rows that has it
// names a REFUNDED order's refund on a view read from the database).
type refunds interface {
	OrderRefunds(ctx context.Context, orderID string) ([]store.Refund, error)
}

// withRefund adds the refund (id, amount, currency, when) to a REFUNDED view
// read from the database (the saga publishes it; a lookup failure only
// leaves it out).
func (s *Orders) withRefund(ctx context.Context, v order.View) order.View {
	rf, ok := s.d.Rows.(refunds)
	if !ok || v.Status != order.StatusRefunded {
		return v
	}
	rs, err := rf.OrderRefunds(ctx, v.OrderID)
	for _, r := range rs {
		v = r.Show(v)
	}
	if err != nil {
		s.log.Debug("refunds of order", "order_id", v.OrderID, "err", err)
	}
	return v
}

// staleAfter is how long an open status in Redis is trusted before the row
// is read too (a saga's Notify may have failed). PENDING_PAYMENT is trusted
// until its deadline.
const staleAfter = 30 * time.Second

func (s *Orders) stale(v order.View) bool {
	switch {
	case v.Status == order.StatusQueued, v.Settling:
		return s.d.Now().Sub(v.UpdatedAt) > staleAfter
	case v.Status == order.StatusPendingPayment:
		return v.PayBy == nil || s.d.Now().After(v.PayBy.Add(order.PayGrace))
	}
	return false
}

// visibleOrder returns the :orderId order if the caller may see it (another
// buyer's is 404).
func (s *Orders) visibleOrder(c *gin.Context) (auth.Principal, order.View, error) {
	p, err := s.d.Auth(c, "")
	if err != nil {
		return p, order.View{}, err
	}
	id := c.Param("orderId")
	if !order.ValidID(id) {
		return p, order.View{}, order.ErrNotFound
	}
	v, err := s.lookupOrder(c.Request.Context(), id)
	if err == nil && !p.IsAdmin() && v.UserID != p.UserID {
		err = order.ErrNotFound
	}
	return p, v, err
}

// GET /api/v1/orders/:orderId (the order's buyer or an admin)
func (s *Orders) getOrder(c *gin.Context) error {
	_, v, err := s.visibleOrder(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, v)
	return nil
}

// POST /api/v1/orders/:orderId/pay and /cancel (the order's buyer), judged
// at the request's arrival; the answer never waits on the saga.
func (s *Orders) pay(c *gin.Context) error    { return s.act(c, Actions.Pay) }
func (s *Orders) cancel(c *gin.Context) error { return s.act(c, Actions.Cancel) }

func (s *Orders) act(c *gin.Context, do func(Actions, context.Context, string, int64, time.Time) (order.View, error)) error {
	receivedAt := s.d.Now()
	// Answered within order.DoorLimit: before the saga may close the order.
	answerBy := time.Now().Add(order.DoorLimit)
	p, err := s.d.Auth(c, "")
	if err != nil {
		return err
	}
	id := c.Param("orderId")
	// The desk matches the buyer by user id alone: no admin gets there.
	if !order.ValidID(id) || p.Role != auth.RoleBuyer {
		return order.ErrNotFound
	}
	if s.d.Actions == nil {
		return apierr.ErrUnavailable
	}
	ctx, cancel := context.WithDeadline(c.Request.Context(), answerBy)
	defer cancel()
	v, err := do(s.d.Actions, ctx, id, p.UserID, receivedAt)
	if errors.Is(err, order.ErrNotFound) {
		// No row yet: a QUEUED order the buyer holds is not payable yet.
		if q, qerr := s.lookupOrder(ctx, id); qerr == nil && q.UserID == p.UserID {
			return apierr.ErrOrderNotPayable
		}
		return order.ErrNotFound
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, v)
	return nil
}

// markWindow is how long after a sale's end its buyer marks are read for an
// order list: as long as a QUEUED view lives (orderstatus.TTL).
const markWindow = 7 * 24 * time.Hour

// GET /api/v1/orders (buyer), ?limit=, ?cursor=: the caller's orders, newest
// first: the rows of one keyset query, and the orders not persisted yet,
// named by the buyer's marks (a mark in the rows' range without its row).
func (s *Orders) listOrders(c *gin.Context) error {
	p, err := s.d.Auth(c, auth.RoleBuyer)
	if err != nil {
		return err
	}
	limit := 20
	if raw, ok := c.GetQuery("limit"); ok {
		if limit, err = strconv.Atoi(raw); err != nil || limit < 1 || limit > 100 {
			return apierr.BadRequest("limit: must be an integer between 1 and 100")
		}
	}
	cursor, hasCursor := c.GetQuery("cursor")
	if hasCursor && !order.ValidID(cursor) {
		return apierr.BadRequest("cursor: must be a next_cursor of an earlier page")
	}
	ctx := c.Request.Context()
	marks, err := s.d.Marks.BuyerOrders(ctx, s.d.Items.IDs(markWindow, s.d.Now()), p.UserID)
	if err != nil {
		s.log.Warn("list orders: buyer marks from redis", "user_id", p.UserID, "err", err)
	}
	rows, err := s.d.Rows.ListUserOrders(ctx, p.UserID, cursor, limit+1)
	if err != nil {
		return err
	}
	views := make([]order.View, 0, len(rows)+len(marks))
	listed := make(map[string]bool, len(rows))
	for _, o := range rows {
		views = append(views, o.View())
		listed[o.OrderID] = true
	}
	var oldest string // on a full page, an older mark belongs to a later page
	if len(rows) > limit {
		oldest = rows[limit].OrderID
	}
	for item, id := range marks {
		if listed[id] || cursor != "" && id >= cursor || id < oldest {
			continue
		}
		v, ok, err := s.d.Views.Status(ctx, id)
		if err != nil || !ok || v.UserID != p.UserID {
			// Its view is gone or unreadable: what the mark says.
			at := order.IDTime(id, time.Time{}).UTC()
			v = order.Message{OrderID: id, ItemID: item, UserID: p.UserID, ReservedAt: at}.QueuedView()
		}
		views = append(views, v)
	}
	slices.SortFunc(views, func(a, b order.View) int { return strings.Compare(b.OrderID, a.OrderID) })
	var next *string
	if len(views) > limit {
		views, next = views[:limit], &views[limit-1].OrderID
	}
	c.JSON(http.StatusOK, gin.H{"orders": views, "next_cursor": next})
	return nil
}
