package stock

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
)

// queuedJSON writes what json.Marshal writes, whatever the times and ids.
func TestQueuedJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2026, 12, 2, 3, 4, 5, 120_000_000, time.UTC)
	payBy := order.Deadline(at, 30)
	for _, m := range []order.Message{
		{OrderID: order.NewID(), ItemID: 17, UserID: 1_000_000_123, ReservedAt: at, PayBy: &payBy},
		{OrderID: order.NewID(), ItemID: 1, UserID: 2, ReservedAt: time.Now()},
		{OrderID: "01J0000000000000000000000Z", ItemID: 3, UserID: 4, ReservedAt: at.In(time.FixedZone("x", 3600)).Truncate(time.Second)},
		{OrderID: `o"<&>\é`, ItemID: 5, UserID: 6, ReservedAt: at, PayBy: &payBy},
	} {
		body, view := queuedJSON(m)
		wantView, _ := json.Marshal(m.QueuedView())
		if string(body) != string(m.Encode()) || string(view) != string(wantView) {
			t.Fatalf("queuedJSON(%+v):\n%s\n%s\nwant\n%s\n%s", m, body, view, m.Encode(), wantView)
		}
	}
}
