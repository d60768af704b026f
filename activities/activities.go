// Package activities holds the saga's forward steps: PersistOrder,
// DecrementStock, Notify and MarkPaid. Each is idempotent and says how; a
// failure no retry can fix is a non-retryable application error whose Type is
// one of the Reason* constants, so the workflow and support staff can read why.
package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Typed reasons of permanent failures (ApplicationError.Type).
const (
	ReasonItemNotFound   = "ITEM_NOT_FOUND"
	ReasonDuplicateOrder = "DUPLICATE_ORDER" // buyer holds another order for the item
	ReasonOrderClosed    = "ORDER_CLOSED"    // the order row is already final: someone else decided it
	ReasonStockExhausted = "STOCK_EXHAUSTED" // stock row at zero although Redis reserved the unit
	ReasonNotPayable     = "ORDER_NOT_PAYABLE"
)

// OrderStore is the database side the forward steps need.
type OrderStore interface {
	GetItem(ctx context.Context, id int64) (store.Item, error)
	CreatePendingOrder(ctx context.Context, o store.Order) (store.Order, error)
	DeductStock(ctx context.Context, orderID string, itemID int64, maxAttempts int) (bool, error)
	SetOrderPaid(ctx context.Context, orderID string) (store.Order, error)
}

// StatusPublisher publishes an order's status for the API (stock.Store).
type StatusPublisher interface {
	PublishStatus(ctx context.Context, v order.View) error
}

// Activities are the forward steps; the workflow refers to them through a
// typed nil pointer and the worker registers one with real dependencies.
type Activities struct {
	orders OrderStore
	status StatusPublisher
}

// New returns the forward steps.
func New(orders OrderStore, status StatusPublisher) *Activities {
	return &Activities{orders: orders, status: status}
}

// OrderRef names an order and what it is for.
type OrderRef struct {
	OrderID string `json:"order_id"`
	ItemID  int64  `json:"item_id"`
	UserID  int64  `json:"user_id"`
}

// PersistResult is the persisted order and the item's payment window.
type PersistResult struct {
	Order                 order.View `json:"order"`
	PaymentTimeoutSeconds int        `json:"payment_timeout_seconds"`
}

// PersistOrder inserts the order as PENDING_PAYMENT and returns the item's
// payment window. Idempotent on order_id: a row already PENDING_PAYMENT (a
// retry after a lost reply) is success. A row already final means someone
// else decided the order (ORDER_CLOSED); the buyer holding another order for
// the item is DUPLICATE_ORDER; both permanent.
func (a *Activities) PersistOrder(ctx context.Context, ref OrderRef) (PersistResult, error) {
	item, err := a.orders.GetItem(ctx, ref.ItemID)
	if errors.Is(err, store.ErrNotFound) {
		return PersistResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ReasonItemNotFound, err)
	}
	if err != nil {
		return PersistResult{}, err
	}
	row, err := a.orders.CreatePendingOrder(ctx, store.Order{OrderID: ref.OrderID, UserID: ref.UserID, ItemID: ref.ItemID})
	if errors.Is(err, store.ErrDuplicate) {
		return PersistResult{}, temporal.NewNonRetryableApplicationError(err.Error(), ReasonDuplicateOrder, err)
	}
	if err != nil {
		return PersistResult{}, err
	}
	if row.Status != order.StatusPendingPayment {
		msg := fmt.Sprintf("order %s is already %s (%s)", row.OrderID, row.Status, row.Reason)
		return PersistResult{}, temporal.NewNonRetryableApplicationError(msg, ReasonOrderClosed, nil, row.View())
	}
	return PersistResult{Order: row.View(), PaymentTimeoutSeconds: item.PaymentTimeoutSeconds}, nil
}

// DecrementStock takes the order's unit from the stock row with the
// optimistic lock; the decrement and the order's stock_deduction marker are
// one transaction, so a retry never decrements twice. Version misses are
// retried inside (bounded), then left to the activity's retry policy. A row
// at zero is STOCK_EXHAUSTED, permanent: Redis and the row disagree and no
// retry fixes that.
func (a *Activities) DecrementStock(ctx context.Context, ref OrderRef) error {
	deducted, err := a.orders.DeductStock(ctx, ref.OrderID, ref.ItemID, store.DefaultDeductAttempts)
	if errors.Is(err, store.ErrStockExhausted) {
		return temporal.NewNonRetryableApplicationError(err.Error(), ReasonStockExhausted, err)
	}
	if err != nil {
		return err
	}
	if !deducted {
		activity.GetLogger(ctx).Info("stock already deducted for this order", "order_id", ref.OrderID)
	}
	return nil
}

// Notify publishes the order view (Redis status key plus pub/sub) so the
// API's status endpoint and event stream see it at once. Publishing the same
// view twice is harmless.
func (a *Activities) Notify(ctx context.Context, v order.View) error {
	return a.status.PublishStatus(ctx, v)
}

// MarkPaid moves the order to PAID; paying a PAID order again is success.
// Any other status is ORDER_NOT_PAYABLE (permanent).
func (a *Activities) MarkPaid(ctx context.Context, ref OrderRef) (order.View, error) {
	row, err := a.orders.SetOrderPaid(ctx, ref.OrderID)
	if errors.Is(err, order.ErrNotPayable) || errors.Is(err, store.ErrNotFound) {
		return order.View{}, temporal.NewNonRetryableApplicationError(err.Error(), ReasonNotPayable, err)
	}
	if err != nil {
		return order.View{}, err
	}
	return row.View(), nil
}
