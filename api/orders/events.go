package orders

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/order"
)

// tooManyStreams refuses an event stream past the open-stream caps.
var tooManyStreams = apierr.RateLimited(5 * time.Second).With("too many open event streams; close one or poll GET /api/v1/orders/:orderId")

// GET /api/v1/orders/:orderId/events: server-sent "status" events, the
// order's now and then one per change until a final status.
func (s *Orders) events(c *gin.Context) error {
	// Subscribe before reading the current view so no change falls between.
	ch, unsubscribe := s.hub.subscribe(c.Param("orderId"))
	defer unsubscribe()
	p, v, err := s.visibleOrder(c)
	if err != nil {
		return err
	}
	release, ok := s.streams.acquire(p.UserID, s.d.Config.StreamsPerBuyer, s.d.Config.StreamsMax)
	if !ok {
		return tooManyStreams
	}
	defer release()
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.d.Config.EventsMax)
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
		_ = rc.SetWriteDeadline(time.Now().Add(s.d.Config.WriteTimeout))
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
	tick := time.NewTicker(s.d.Config.EventsPoll)
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

// newer reports whether nv is a later state of the order than v.
func newer(v, nv order.View) bool {
	if v.Settled() && nv.Rank() <= v.Rank() || nv.Status == v.Status && nv.Reason == v.Reason && nv.Settling == v.Settling {
		return false
	}
	if nv.Rank() != v.Rank() {
		return nv.Rank() > v.Rank()
	}
	return !nv.UpdatedAt.Before(v.UpdatedAt)
}

// hub fans this instance's one subscription out to the event streams.
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

// publish delivers an order view to its streams; a full one catches up at
// its next poll.
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

// streamCounts caps the open event streams.
type streamCounts struct {
	mu      sync.Mutex
	total   int
	byBuyer map[int64]int
}

// acquire opens a stream slot for the buyer within the caps.
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
