package purchase

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
)

// The hand-appended 202 body is exactly what encoding/json makes of it.
func TestAcceptedBodyIsJSON(t *testing.T) {
	type body struct {
		OrderID string       `json:"order_id"`
		Status  order.Status `json:"status"`
		PayBy   *time.Time   `json:"pay_by,omitempty"`
	}
	for _, payBy := range []*time.Time{nil, new(order.Deadline(time.Now(), 30)), new(time.Date(2026, 12, 1, 21, 0, 0, 0, time.UTC))} {
		msg := order.Message{OrderID: order.NewID(), ItemID: 1, UserID: 2, PayBy: payBy}
		want, _ := json.Marshal(body{OrderID: msg.OrderID, Status: order.StatusQueued, PayBy: payBy})
		if got := acceptedJSON(msg); string(got) != string(want) {
			t.Fatalf("202 body %s, encoding/json %s", got, want)
		}
	}
}
