// Package order holds the vocabulary every stage of the pipeline shares: order
// ids, statuses, the queue message and the order view returned to buyers.
package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

// Status is the lifecycle state of an order.
type Status string

// The statuses, in the order an order moves through them.
const (
	StatusQueued         Status = "QUEUED"          // reserved in Redis, message not yet turned into a saga
	StatusPendingPayment Status = "PENDING_PAYMENT" // persisted, stock taken, waiting for payment
	StatusPaid           Status = "PAID"
	StatusCancelled      Status = "CANCELLED" // buyer cancelled or payment timed out; unit released
	StatusFailed         Status = "FAILED"    // a step failed for good; unit released
)

// Final reports whether no further change can happen.
func (s Status) Final() bool {
	return s == StatusPaid || s == StatusCancelled || s == StatusFailed
}

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusPendingPayment, StatusPaid, StatusCancelled, StatusFailed:
		return true
	}
	return false
}

// Errors shared by the stages that look orders up or act on them.
var (
	ErrNotFound   = errors.New("order not found")
	ErrNotPayable = errors.New("order is no longer pending payment")
)

// NewID returns a new order id: a ULID, unique across instances and restarts
// (80 random bits) and ordered by creation time (48-bit millisecond prefix).
func NewID() string { return ulid.Make().String() }

// ValidID reports whether id looks like an order id made by NewID.
func ValidID(id string) bool {
	_, err := ulid.ParseStrict(id)
	return err == nil
}

// IDTime is when the order id was made (its ULID's millisecond prefix), or
// fallback when id is not a ULID.
func IDTime(id string, fallback time.Time) time.Time {
	if u, err := ulid.ParseStrict(id); err == nil {
		return ulid.Time(u.Time())
	}
	return fallback
}

// Message is the body of a message on the seckill-orders topic. Its key is
// the order id.
type Message struct {
	OrderID    string    `json:"order_id"`
	ItemID     int64     `json:"item_id"`
	UserID     int64     `json:"user_id"`
	ReservedAt time.Time `json:"reserved_at"`
}

// Encode returns the JSON body.
func (m Message) Encode() []byte {
	b, _ := json.Marshal(m) // a struct of plain fields cannot fail to marshal
	return b
}

// DecodeMessage parses and validates a message body.
func DecodeMessage(b []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		return Message{}, fmt.Errorf("decode order message: %w", err)
	}
	if m.OrderID == "" || m.ItemID <= 0 || m.UserID <= 0 {
		return Message{}, fmt.Errorf("decode order message: missing order_id, item_id or user_id in %q", b)
	}
	return m, nil
}

// View is an order as the API returns it and as the saga publishes it.
type View struct {
	OrderID string `json:"order_id"`
	ItemID  int64  `json:"item_id"`
	UserID  int64  `json:"user_id"`
	Status  Status `json:"status"`
	Reason  string `json:"reason"`
	// PayBy is the payment deadline (RFC 3339), set once the order is
	// PENDING_PAYMENT: a pay or cancel the API receives before it is taken.
	PayBy     *time.Time `json:"pay_by,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt time.Time  `json:"updated_at"`
}

// Payable reports whether a pay or cancel received at t is in time: the
// order is PENDING_PAYMENT and its deadline has not passed.
func (v View) Payable(t time.Time) bool {
	return v.Status == StatusPendingPayment && v.PayBy != nil && t.Before(*v.PayBy)
}

// PayGrace is how long after an order's deadline the saga waits before it
// closes the order unpaid: a pay the API received in time but is still
// writing (bounded by DoorLimit, well under this) lands first.
// Clocks of the API hosts, the database and the Temporal server must agree
// to well within it (NTP).
const PayGrace = 10 * time.Second

// DoorLimit bounds a pay's or cancel's work at the door, from its arrival to
// its answer: past it the API answers 503 (not recorded in time) instead of
// waiting on. Half of PayGrace, so that a pay received before pay_by is
// recorded, or its buyer told to try again, before the saga may close the
// order; never refused because it was slow.
const DoorLimit = PayGrace / 2

// Reasons recorded with CANCELLED and FAILED orders (seckill_order.reason
// starts with one of them).
const (
	ReasonPaymentTimeout    = "PAYMENT_TIMEOUT"
	ReasonBuyerCancelled    = "BUYER_CANCELLED"
	ReasonOperatorCancelled = "CANCELLED_BY_OPERATOR" // Temporal workflow cancel
	ReasonStockExhausted    = "STOCK_EXHAUSTED"       // the stock row had no unit for a Redis reservation
	ReasonDuplicateOrder    = "DUPLICATE_ORDER"       // the buyer holds another order for the item
	ReasonItemNotFound      = "ITEM_NOT_FOUND"
	ReasonOrderClosed       = "ORDER_CLOSED" // the row was already final when a step ran
	ReasonNotPayable        = "ORDER_NOT_PAYABLE"
)
