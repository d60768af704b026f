// Package order holds the vocabulary every stage shares: order ids,
// statuses, the queue message and the order view.
package order

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
)

type Status string

const (
	StatusQueued         Status = "QUEUED"          // reserved in Redis, message not yet turned into a saga
	StatusPendingPayment Status = "PENDING_PAYMENT" // persisted, stock taken, waiting for payment
	StatusPaid           Status = "PAID"
	StatusCancelled      Status = "CANCELLED" // buyer cancelled or payment timed out; unit released
	StatusFailed         Status = "FAILED"    // a step failed for good; unit released
	StatusRefunded       Status = "REFUNDED"  // paid while QUEUED, the stock row had no unit: payment given back
)

// Holds reports whether the status holds a unit (QUEUED: not yet from the stock row).
func (s Status) Holds() bool {
	return s == StatusQueued || s == StatusPendingPayment || s == StatusPaid
}

// Final: the status cannot change (but a settling PAID view can become REFUNDED).
func (s Status) Final() bool {
	return s == StatusPaid || s == StatusCancelled || s == StatusFailed || s == StatusRefunded
}

// Every layer wraps these; the API maps them to HTTP.
var (
	ErrNotFound     = errors.New("order not found")
	ErrItemNotFound = errors.New("item not found")
	ErrNotPayable   = errors.New("order is no longer pending payment")
	// ErrNotRefundable: support refunds only a PAID order paid through a provider.
	ErrNotRefundable = errors.New("order is not refundable")
)

// NewID returns a new order id: a ULID, unique and ordered by creation time.
func NewID() string { return ulid.Make().String() }

// ValidID reports whether id looks like an order id made by NewID.
func ValidID(id string) bool {
	_, err := ulid.ParseStrict(id)
	return err == nil
}

// IDTime is when the order id was made, or fallback when it is not a ULID.
func IDTime(id string, fallback time.Time) time.Time {
	if u, err := ulid.ParseStrict(id); err == nil {
		return ulid.Time(u.Time())
	}
	return fallback
}

// Message is the body of a message on the seckill-orders topic (key: the order id).
type Message struct {
	OrderID    string     `json:"order_id"`
	ItemID     int64      `json:"item_id"`
	UserID     int64      `json:"user_id"`
	ReservedAt time.Time  `json:"reserved_at"`
	PayBy      *time.Time `json:"pay_by,omitempty"` // nil: the saga sets it as it takes the unit
}

// Deadline is the payment deadline, at the order row's millisecond precision.
func Deadline(reservedAt time.Time, windowSeconds int) time.Time {
	return reservedAt.Add(time.Duration(windowSeconds) * time.Second).UTC().Truncate(time.Millisecond)
}

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

// QueuedView is the view of the order m reserved: QUEUED since ReservedAt.
func (m Message) QueuedView() View {
	return View{OrderID: m.OrderID, ItemID: m.ItemID, UserID: m.UserID, Status: StatusQueued,
		PayBy: m.PayBy, CreatedAt: m.ReservedAt, UpdatedAt: m.ReservedAt}
}

// View is an order as the API returns it and as the saga publishes it.
type View struct {
	OrderID string     `json:"order_id"`
	ItemID  int64      `json:"item_id"`
	UserID  int64      `json:"user_id"`
	Status  Status     `json:"status"`
	Reason  string     `json:"reason"`
	PayBy   *time.Time `json:"pay_by,omitempty"`
	// Settling: PAID while QUEUED, its stock-row unit not taken yet; it
	// settles PAID, or REFUNDED if the row has none.
	Settling bool `json:"settling,omitempty"`
	// The refund of the order's payment (REFUNDED): the provider's id, the
	// amount in minor units, its currency, when the provider confirmed it.
	RefundID       string     `json:"refund_id,omitempty"`
	RefundAmount   int64      `json:"refund_amount,omitempty"`
	RefundCurrency string     `json:"refund_currency,omitempty"`
	RefundedAt     *time.Time `json:"refunded_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
}

// Settled reports whether the view can no longer change.
func (v View) Settled() bool { return v.Status.Final() && !v.Settling }

// Rank: a published view never replaces one of a higher rank.
func (v View) Rank() int {
	switch {
	case v.Settled() && v.RefundID != "":
		return 4 // a closed order's refund, confirmed later, replaces its close
	case v.Settled():
		return 3
	case v.Status.Final():
		return 2
	case v.Status == StatusPendingPayment:
		return 1
	}
	return 0
}

// PayGrace is how long after the deadline the saga waits before it closes an
// order unpaid (a pay received in time lands first); clocks must agree within it.
const PayGrace = 10 * time.Second

// DoorLimit bounds a pay's or cancel's work at the door (then 503): half of
// PayGrace, so it is done before the saga may close the order.
const DoorLimit = PayGrace / 2

// Reasons recorded with CANCELLED and FAILED orders (a prefix of seckill_order.reason).
const (
	ReasonPaymentTimeout    = "PAYMENT_TIMEOUT"
	ReasonBuyerCancelled    = "BUYER_CANCELLED"
	ReasonOperatorCancelled = "CANCELLED_BY_OPERATOR" // Temporal workflow cancel
	ReasonStockExhausted    = "STOCK_EXHAUSTED"       // the stock row had no unit for a Redis reservation
	ReasonDuplicateOrder    = "DUPLICATE_ORDER"       // the buyer holds another order for the item
	ReasonItemNotFound      = "ITEM_NOT_FOUND"
	ReasonOrderClosed       = "ORDER_CLOSED" // the row was already final when a step ran
	ReasonNotPayable        = "ORDER_NOT_PAYABLE"
	ReasonSupportRefund     = "SUPPORT_REFUND" // a PAID order refunded by support (REFUNDED)
)
