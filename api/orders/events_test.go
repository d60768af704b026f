package orders

import (
	"testing"
	"time"

	"github.com/seckill/seckill/order"
)

// The hub delivers a view to the streams of its order only, drops it for a
// stream whose buffer is full (that stream catches up at its next poll), and
// forgets an order once its last stream unsubscribed.
func TestHubFansOutByOrder(t *testing.T) {
	h := newHub()
	a, unsubA := h.subscribe("A")
	b, unsubB := h.subscribe("B")
	h.publish(order.View{OrderID: "A", Status: order.StatusPendingPayment})
	select {
	case v := <-a:
		if v.OrderID != "A" {
			t.Fatalf("stream of A got %s", v.OrderID)
		}
	case <-time.After(time.Second):
		t.Fatal("stream of A got nothing")
	}
	select {
	case v := <-b:
		t.Fatalf("stream of B got a view of %s", v.OrderID)
	default:
	}
	for range 2 * cap(a) { // a full buffer never blocks the publisher
		h.publish(order.View{OrderID: "A"})
	}
	if len(a) != cap(a) {
		t.Fatalf("%d views buffered, want %d", len(a), cap(a))
	}
	unsubA()
	unsubB()
	if len(h.subs) != 0 {
		t.Fatalf("%d orders still subscribed", len(h.subs))
	}
}

// A view replaces the one a stream showed only if it is further along, or
// as far along and later; a settled order takes none but its refund.
func TestNewer(t *testing.T) {
	at := time.Now()
	queued := order.View{Status: order.StatusQueued, UpdatedAt: at}
	pending := order.View{Status: order.StatusPendingPayment, UpdatedAt: at}
	paid := order.View{Status: order.StatusPaid, UpdatedAt: at}
	for _, c := range []struct {
		name    string
		v, nv   order.View
		replace bool
	}{
		{"further along", queued, pending, true},
		{"back to an earlier status", pending, queued, false},
		{"the same view", pending, pending, false},
		{"after a settled one", paid, order.View{Status: order.StatusCancelled, UpdatedAt: at.Add(time.Second)}, false},
		{"paid, settling then settled", order.View{Status: order.StatusPaid, Settling: true, UpdatedAt: at}, paid, true},
		{"cancelled, then its refund confirmed", order.View{Status: order.StatusCancelled, UpdatedAt: at},
			order.View{Status: order.StatusRefunded, RefundID: "re_1", UpdatedAt: at}, true},
		{"refunded, then a close", order.View{Status: order.StatusRefunded, RefundID: "re_1", UpdatedAt: at},
			order.View{Status: order.StatusCancelled, UpdatedAt: at.Add(time.Second)}, false},
	} {
		if got := newer(c.v, c.nv); got != c.replace {
			t.Errorf("%s: newer = %v, want %v", c.name, got, c.replace)
		}
	}
}

// The open streams are capped per buyer and in all; a release frees a slot.
func TestStreamCountsCap(t *testing.T) {
	var s streamCounts
	r1, ok1 := s.acquire(1, 2, 3)
	_, ok2 := s.acquire(1, 2, 3)
	if _, ok := s.acquire(1, 2, 3); !ok1 || !ok2 || ok {
		t.Fatal("a buyer's third stream was let in, or one of the first two refused")
	}
	if _, ok := s.acquire(2, 2, 3); !ok {
		t.Fatal("another buyer's first stream refused")
	}
	if _, ok := s.acquire(3, 2, 3); ok {
		t.Fatal("a stream past the total cap let in")
	}
	r1()
	if _, ok := s.acquire(3, 2, 3); !ok {
		t.Fatal("a released slot not reused")
	}
}
