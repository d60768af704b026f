package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
)

// lookupOrder returns the latest view of an order: the status the saga (or
// the purchase, for QUEUED) stored in Redis, else the database row.
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

// staleAfter is how long an open status published in Redis is trusted before
// GET also reads the order row: a saga's Notify may have failed (Redis down)
// while the row moved on.
const staleAfter = 30 * time.Second

// stale reports whether an open view may be behind the database: QUEUED (or
// PAID still settling) for longer than staleAfter, or PENDING_PAYMENT past
// its deadline.
func (s *Server) stale(v order.View) bool {
	now := s.now()
	switch {
	case v.Status == order.StatusQueued, v.Settling:
		return now.Sub(v.UpdatedAt) > staleAfter
	case v.Status == order.StatusPendingPayment:
		return v.PayBy == nil || now.After(v.PayBy.Add(order.PayGrace))
	}
	return false
}

// visibleOrder authenticates, parses the id and returns the order if the
// principal may see it; another buyer's order is 404, like a missing one.
func (s *Server) visibleOrder(c *gin.Context) (auth.Principal, order.View, bool) {
	p, ok := s.authenticate(c)
	if !ok {
		return p, order.View{}, false
	}
	id := c.Param("orderId")
	if !order.ValidID(id) {
		s.fail(c, order.ErrNotFound)
		return p, order.View{}, false
	}
	v, err := s.lookupOrder(c.Request.Context(), id)
	if err != nil {
		s.fail(c, err)
		return p, order.View{}, false
	}
	if !p.IsAdmin() && v.UserID != p.UserID {
		s.fail(c, order.ErrNotFound)
		return p, order.View{}, false
	}
	return p, v, true
}

// GET /api/v1/orders/:orderId (the order's buyer or an admin)
func (s *Server) getOrder(c *gin.Context) {
	if _, v, ok := s.visibleOrder(c); ok {
		c.JSON(http.StatusOK, v)
	}
}

// POST /api/v1/orders/:orderId/pay (the order's buyer)
func (s *Server) pay(c *gin.Context) { s.act(c, true) }

// POST /api/v1/orders/:orderId/cancel (the order's buyer)
func (s *Server) cancel(c *gin.Context) { s.act(c, false) }

// act runs pay or cancel, judged at the door: the time the request arrived
// is what counts against the order's deadline, and the answer never waits on
// the saga. Only the buyer who owns the order may act on it; admins (and
// other buyers) get 404 ORDER_NOT_FOUND. An order the buyer holds that is not
// pending payment (still QUEUED, or closed) is 409 ORDER_NOT_PAYABLE.
func (s *Server) act(c *gin.Context, pay bool) {
	receivedAt := s.now()
	// The whole answer within order.DoorLimit of arrival (the desk bounds
	// its own work the same way): a buyer who paid in time learns the
	// outcome before the saga may close the order.
	answerBy := time.Now().Add(order.DoorLimit)
	p, ok := s.authenticate(c)
	if !ok {
		return
	}
	id := c.Param("orderId")
	// The desk matches the order's buyer by user id alone: an admin whose
	// id equals the buyer's must not get that far.
	if !order.ValidID(id) || p.Role != auth.RoleBuyer {
		s.fail(c, order.ErrNotFound)
		return
	}
	if s.deps.Actions == nil {
		s.fail(c, ErrUnavailable)
		return
	}
	ctx, cancel := context.WithDeadline(c.Request.Context(), answerBy)
	defer cancel()
	var v order.View
	var err error
	if pay {
		v, err = s.deps.Actions.Pay(ctx, id, p.UserID, receivedAt)
	} else {
		v, err = s.deps.Actions.Cancel(ctx, id, p.UserID, receivedAt)
	}
	switch {
	case err == nil:
		c.JSON(http.StatusOK, v)
	case errors.Is(err, order.ErrNotFound):
		// No row yet: a QUEUED order the buyer holds is not payable yet.
		if q, qerr := s.lookupOrder(ctx, id); qerr == nil && q.UserID == p.UserID {
			s.fail(c, ErrOrderNotPayable)
			return
		}
		s.fail(c, order.ErrNotFound)
	default:
		s.fail(c, err)
	}
}

// GET /api/v1/orders/:orderId/events: server-sent events. One "status" event
// with the order at once, then one per change, until a final status.
func (s *Server) events(c *gin.Context) {
	// Subscribe before reading the current view so no change falls between.
	ch, unsubscribe := s.hub.subscribe(c.Param("orderId"))
	defer unsubscribe()
	p, v, ok := s.visibleOrder(c)
	if !ok {
		return
	}
	release, ok := s.streams.acquire(p.UserID, s.cfg.StreamsPerBuyer, s.cfg.StreamsMax)
	if !ok {
		s.fail(c, tooManyStreams)
		return
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
	send := func(v order.View) bool {
		b, _ := json.Marshal(v)
		_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
		if _, err := c.Writer.Write(append(append([]byte("event: status\ndata: "), b...), '\n', '\n')); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(v) || v.Settled() {
		return
	}
	tick := time.NewTicker(s.cfg.EventsPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case nv := <-ch:
			if !newer(v, nv) {
				continue
			}
			v = nv
		case <-tick.C:
			nv, err := s.lookupOrder(ctx, v.OrderID)
			if err != nil || !newer(v, nv) {
				_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
				if _, err := c.Writer.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
					return
				}
				continue
			}
			v = nv
		}
		if !send(v) || v.Settled() {
			return
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

// hub fans the one Redis subscription of this instance out to the event
// streams waiting on each order.
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
