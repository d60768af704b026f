package order

import (
	"testing"
	"time"
)

func TestNewIDUniqueAndOrdered(t *testing.T) {
	seen := map[string]bool{}
	prev := ""
	for i := 0; i < 10000; i++ {
		id := NewID()
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
		if !ValidID(id) {
			t.Fatalf("invalid id %s", id)
		}
		if id <= prev {
			t.Fatalf("ids not increasing: %s after %s", id, prev)
		}
		prev = id
	}
	if ValidID("../etc/passwd") || ValidID("") {
		t.Fatal("garbage accepted as an order id")
	}
}

func TestMessageRoundTrip(t *testing.T) {
	m := Message{OrderID: NewID(), ItemID: 7, UserID: 1001, ReservedAt: time.Now().UTC().Truncate(time.Millisecond)}
	got, err := DecodeMessage(m.Encode())
	if err != nil || got != m {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if _, err := DecodeMessage([]byte(`{"order_id":""}`)); err == nil {
		t.Fatal("empty message accepted")
	}
}

func TestStatusFinal(t *testing.T) {
	if StatusQueued.Final() || StatusPendingPayment.Final() || !StatusPaid.Final() || !StatusCancelled.Final() || !StatusFailed.Final() {
		t.Fatal("Final wrong")
	}
}
