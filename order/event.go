package order

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event is a change of an order's settled status as the shop's systems
// receive it on the order events topic (docs/events.schema.json).
type Event struct {
	EventID     string    `json:"event_id"` // <order_id>:<status>; a redelivery carries the same
	OrderID     string    `json:"order_id"`
	Seq         int       `json:"seq"` // the order's events count from 1, in the order they happened
	BuyerID     int64     `json:"buyer_id"`
	ItemID      int64     `json:"item_id"`
	Status      Status    `json:"status"` // PAID, CANCELLED, FAILED or REFUNDED
	Reason      string    `json:"reason"`
	AmountMinor int64     `json:"amount_minor"`
	Currency    string    `json:"currency"`
	PaymentID   string    `json:"payment_id"` // the provider's; "" for a pay at the door
	RefundID    string    `json:"refund_id"`  // the provider's refund, once confirmed
	OccurredAt  time.Time `json:"occurred_at"`
}

// EventID is the id of the event of orderID reaching status: an order
// reaches each settled status at most once.
func EventID(orderID string, status Status) string { return orderID + ":" + string(status) }

// DecodeEvent parses an event body.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("decode order event: %w", err)
	}
	if e.EventID != EventID(e.OrderID, e.Status) || e.Seq < 1 {
		return Event{}, fmt.Errorf("decode order event: bad event_id or seq in %q", b)
	}
	return e, nil
}
