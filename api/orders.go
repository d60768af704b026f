package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// lookupOrder returns the latest view of an order: Redis's, else the row.
func (s *Server) lookupOrder(ctx context.Context, orderID string) (order.View, error) {
	v, ok, err := s.views.Status(ctx, orderID)
	if err == nil && ok && !s.stale(v) {
		return v, nil
	}
	if err != nil {
		s.log.Debug("order status from redis", "order_id", orderID, "err", err)
	}
	o, dbErr := s.deps.Orders.FindOrder(ctx, orderID)
	switch {
	case dbErr == nil:
		return o.View(), nil
	case ok:
		return v, nil // a stale view is better than none (no row yet, or MySQL down)
	case errors.Is(dbErr, order.ErrNotFound) && err != nil:
		return order.View{}, err // Redis down and no row: cannot tell
	}
	return order.View{}, dbErr
}

// staleAfter is how long an open status in Redis is trusted before GET also
// reads the row: a saga's Notify may have failed (Redis down) while the row
// moved on. PENDING_PAYMENT is trusted until its deadline.
const staleAfter = 30 * time.Second

func (s *Server) stale(v order.View) bool {
	switch {
	case v.Status == order.StatusQueued, v.Settling:
		return s.now().Sub(v.UpdatedAt) > staleAfter
	case v.Status == order.StatusPendingPayment:
		return v.PayBy == nil || s.now().After(v.PayBy.Add(order.PayGrace))
	}
	return false
}

// visibleOrder returns the :orderId order if the caller may see it; another
// buyer's order is 404, like a missing one.
func (s *Server) visibleOrder(c *gin.Context) (auth.Principal, order.View, error) {
	p, err := s.authenticate(c, "")
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
func (s *Server) getOrder(c *gin.Context) error {
	_, v, err := s.visibleOrder(c)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, v)
	return nil
}

// POST /api/v1/orders/:orderId/pay and /cancel (the order's buyer), judged
// at the door (payment.Desk) at the time the request arrived; the answer
// never waits on the saga.
func (s *Server) pay(c *gin.Context) error    { return s.act(c, OrderActions.Pay) }
func (s *Server) cancel(c *gin.Context) error { return s.act(c, OrderActions.Cancel) }

func (s *Server) act(c *gin.Context, do func(OrderActions, context.Context, string, int64, time.Time) (order.View, error)) error {
	receivedAt := s.now()
	// The whole answer within order.DoorLimit of arrival, as the desk bounds
	// its own work: a buyer who paid in time learns the outcome before the
	// saga may close the order.
	answerBy := time.Now().Add(order.DoorLimit)
	p, err := s.authenticate(c, "")
	if err != nil {
		return err
	}
	id := c.Param("orderId")
	// The desk matches the order's buyer by user id alone: an admin whose
	// id equals the buyer's must not get that far.
	if !order.ValidID(id) || p.Role != auth.RoleBuyer {
		return order.ErrNotFound
	}
	if s.deps.Actions == nil {
		return ErrUnavailable
	}
	ctx, cancel := context.WithDeadline(c.Request.Context(), answerBy)
	defer cancel()
	v, err := do(s.deps.Actions, ctx, id, p.UserID, receivedAt)
	if errors.Is(err, order.ErrNotFound) {
		// No row yet: a QUEUED order the buyer holds is not payable yet.
		if q, qerr := s.lookupOrder(ctx, id); qerr == nil && q.UserID == p.UserID {
			return ErrOrderNotPayable
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
// order list: an order lives only in Redis until its saga persists it, at
// worst as long as its QUEUED view (orderstatus.TTL).
const markWindow = 7 * 24 * time.Hour

// GET /api/v1/orders (buyer), ?limit=, ?cursor=: the caller's orders, newest
// first (order ids are ULIDs): the rows of one keyset query, and the orders
// not persisted yet, named by the buyer's marks (one pipelined HGET per item
// whose sale ended less than markWindow ago) with their views from Redis. The
// rows hold every persisted order between the cursor and the oldest row, so a
// mark in that range without its row is an order not persisted yet.
func (s *Server) listOrders(c *gin.Context) error {
	p, err := s.authenticate(c, auth.RoleBuyer)
	if err != nil {
		return err
	}
	limit := 20
	if raw, ok := c.GetQuery("limit"); ok {
		if limit, err = strconv.Atoi(raw); err != nil || limit < 1 || limit > 100 {
			return badRequest("limit: must be an integer between 1 and 100")
		}
	}
	cursor, hasCursor := c.GetQuery("cursor")
	if hasCursor && !order.ValidID(cursor) {
		return badRequest("cursor: must be a next_cursor of an earlier page")
	}
	ctx := c.Request.Context()
	marks, err := s.units.BuyerOrders(ctx, itemIDs(s.items.all(markWindow, s.now())), p.UserID)
	if err != nil {
		// The persisted orders can still be listed.
		s.log.Warn("list orders: buyer marks from redis", "user_id", p.UserID, "err", err)
	}
	rows, err := s.deps.Orders.ListUserOrders(ctx, p.UserID, cursor, limit+1)
	if err != nil {
		return err
	}
	views := make([]order.View, 0, len(rows)+len(marks))
	listed := make(map[string]bool, len(rows))
	for _, o := range rows {
		views = append(views, o.View())
		listed[o.OrderID] = true
	}
	var oldest string // on a full page, a mark older than its oldest row belongs to a later page
	if len(rows) > limit {
		oldest = rows[limit].OrderID
	}
	for item, id := range marks {
		if listed[id] || cursor != "" && id >= cursor || id < oldest {
			continue
		}
		v, ok, err := s.views.Status(ctx, id)
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

// GET /api/v1/orders/:orderId/events: server-sent "status" events, the
// order's now and then one per change until a final status.
func (s *Server) events(c *gin.Context) error {
	// Subscribe before reading the current view so no change falls between.
	ch, unsubscribe := s.hub.subscribe(c.Param("orderId"))
	defer unsubscribe()
	p, v, err := s.visibleOrder(c)
	if err != nil {
		return err
	}
	release, ok := s.streams.acquire(p.UserID, s.cfg.StreamsPerBuyer, s.cfg.StreamsMax)
	if !ok {
		return tooManyStreams
	}
	defer release()
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.cfg.EventsMax)
	defer cancel()
	rc := http.NewResponseController(c.Writer)
	// The stream outlives the server's read and write timeouts.
	_ = rc.SetReadDeadline(time.Time{})
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		_, err := c.Writer.Write(b)
		return err == nil && rc.Flush() == nil
	}
	send := func(v order.View) bool {
		b, _ := json.Marshal(v)
		return write(append(append([]byte("event: status\ndata: "), b...), '\n', '\n')) && !v.Settled()
	}
	if !send(v) {
		return nil
	}
	tick := time.NewTicker(s.cfg.EventsPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case nv := <-ch:
			if !newer(v, nv) {
				continue
			}
			v = nv
		case <-tick.C:
			nv, err := s.lookupOrder(ctx, v.OrderID)
			if err != nil || !newer(v, nv) {
				if !write([]byte(": keep-alive\n\n")) {
					return nil
				}
				continue
			}
			v = nv
		}
		if !send(v) {
			return nil
		}
	}
}

// newer reports whether nv is a later state of the order than v: further
// along (order.View.Rank), or as far along with a later update.
func newer(v, nv order.View) bool {
	if v.Settled() || nv.Status == v.Status && nv.Reason == v.Reason && nv.Settling == v.Settling {
		return false
	}
	if nv.Rank() != v.Rank() {
		return nv.Rank() > v.Rank()
	}
	return !nv.UpdatedAt.Before(v.UpdatedAt)
}

// hub fans this instance's one Redis subscription out to the event streams.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan order.View]struct{}
}

func newHub() *hub { return &hub{subs: make(map[string]map[chan order.View]struct{})} }

func (h *hub) subscribe(orderID string) (<-chan order.View, func()) {
	ch := make(chan order.View, 8)
	h.mu.Lock()
	set := h.subs[orderID]
	if set == nil {
		set = make(map[chan order.View]struct{})
		h.subs[orderID] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(set, ch)
		if len(set) == 0 {
			delete(h.subs, orderID)
		}
		h.mu.Unlock()
	}
}

// publish delivers an order view to its waiting streams. A stream whose
// buffer is full misses it and catches up at its next poll.
func (h *hub) publish(v order.View) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[v.OrderID] {
		select {
		case ch <- v:
		default:
		}
	}
}

// streamCounts caps the open event streams (each holds a goroutine, a
// subscription and buffers for up to EventsMax).
type streamCounts struct {
	mu      sync.Mutex
	total   int
	byBuyer map[int64]int
}

// acquire opens a stream slot for the buyer, unless it has perBuyer or
// there are max in all.
func (s *streamCounts) acquire(buyer int64, perBuyer, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byBuyer == nil {
		s.byBuyer = make(map[int64]int)
	}
	if s.total >= max || s.byBuyer[buyer] >= perBuyer {
		return nil, false
	}
	s.total++
	s.byBuyer[buyer]++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if s.byBuyer[buyer]--; s.byBuyer[buyer] <= 0 {
			delete(s.byBuyer, buyer)
		}
	}, true
}
