// Package activities holds the saga's forward steps, each idempotent; only
// business outcomes (order.Reason* error types) are final.
package activities

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

type OrderStore interface {
	GetItem(ctx context.Context, id int64) (store.Item, error)
	CreateQueuedOrder(ctx context.Context, o store.Order) (store.Order, error)
	DeductStock(ctx context.Context, orderID string, itemID int64, window time.Duration) (store.Order, bool, error)
	ConfirmPaid(ctx context.Context, orderID string) (store.Order, error)
}

// StatusPublisher publishes an order's status for the API (orderstatus.Board).
type StatusPublisher interface {
	PublishStatus(ctx context.Context, v order.View) error
}

// Observer is told how long each order took from its 202 to PENDING_PAYMENT.
type Observer interface{ Observe(seconds float64) }

type Activities struct {
	orders  OrderStore
	status  StatusPublisher
	payable Observer
}

func New(orders OrderStore, status StatusPublisher, payable Observer) *Activities {
	return &Activities{orders: orders, status: status, payable: payable}
}

type OrderRef struct {
	OrderID string     `json:"order_id"`
	ItemID  int64      `json:"item_id"`
	UserID  int64      `json:"user_id"`
	PayBy   *time.Time `json:"pay_by,omitempty"` // the order message's deadline
}

type PersistResult struct {
	Order                 order.View `json:"order"`
	PaymentTimeoutSeconds int        `json:"payment_timeout_seconds"`
}

// closed is the permanent failure of a step that found the order row final.
func closed(row store.Order) error {
	msg := fmt.Sprintf("order %s is already %s (%s)", row.OrderID, row.Status, row.Reason)
	return temporal.NewNonRetryableApplicationError(msg, order.ReasonOrderClosed, nil, row.View())
}

// PersistOrder records the order QUEUED (idempotent) and returns it with the
// item's payment window.
func (a *Activities) PersistOrder(ctx context.Context, ref OrderRef) (PersistResult, error) {
	item, err := a.orders.GetItem(ctx, ref.ItemID)
	if errors.Is(err, order.ErrItemNotFound) {
		return PersistResult{}, temporal.NewNonRetryableApplicationError(err.Error(), order.ReasonItemNotFound, err)
	}
	if err != nil {
		return PersistResult{}, err
	}
	row, err := a.orders.CreateQueuedOrder(ctx, store.Order{OrderID: ref.OrderID, UserID: ref.UserID, ItemID: ref.ItemID, PayBy: ref.PayBy})
	if errors.Is(err, store.ErrDuplicate) {
		return PersistResult{}, temporal.NewNonRetryableApplicationError(err.Error(), order.ReasonDuplicateOrder, err)
	}
	if err != nil {
		return PersistResult{}, err
	}
	if row.Status.Final() {
		return PersistResult{}, closed(row)
	}
	return PersistResult{Order: row.View(), PaymentTimeoutSeconds: item.PaymentTimeoutSeconds}, nil
}

type DeductInput struct {
	OrderRef
	PaymentTimeoutSeconds int `json:"payment_timeout_seconds"`
}

// DecrementStock takes the order's unit from the stock row (at most once).
func (a *Activities) DecrementStock(ctx context.Context, in DeductInput) (order.View, error) {
	window := time.Duration(in.PaymentTimeoutSeconds) * time.Second
	row, deducted, err := a.orders.DeductStock(ctx, in.OrderID, in.ItemID, window)
	switch {
	case errors.Is(err, store.ErrStockExhausted):
		return order.View{}, temporal.NewNonRetryableApplicationError(err.Error(), order.ReasonStockExhausted, err)
	case errors.Is(err, order.ErrItemNotFound), errors.Is(err, order.ErrNotFound): // no stock row (or order row)
		return order.View{}, temporal.NewNonRetryableApplicationError(err.Error(), order.ReasonItemNotFound, err)
	case errors.Is(err, store.ErrOrderClosed):
		if row.OrderID == "" {
			row = store.Order{OrderID: in.OrderID, ItemID: in.ItemID, UserID: in.UserID, Status: order.StatusFailed}
		}
		return order.View{}, closed(row)
	case err != nil:
		return order.View{}, err
	}
	if !deducted {
		activity.GetLogger(ctx).Info("stock already deducted for this order", "order_id", in.OrderID)
	} else if id, err := ulid.Parse(in.OrderID); err == nil && a.payable != nil {
		a.payable.Observe(time.Since(ulid.Time(id.Time())).Seconds())
	}
	return row.View(), nil
}

// Notify publishes the order view for the API.
func (a *Activities) Notify(ctx context.Context, v order.View) error {
	return a.status.PublishStatus(ctx, v)
}

// MarkPaid moves the order to PAID; any status but PAID is ORDER_NOT_PAYABLE.
func (a *Activities) MarkPaid(ctx context.Context, ref OrderRef) (order.View, error) {
	row, err := a.orders.ConfirmPaid(ctx, ref.OrderID)
	if errors.Is(err, order.ErrNotPayable) || errors.Is(err, order.ErrNotFound) {
		return order.View{}, temporal.NewNonRetryableApplicationError(err.Error(), order.ReasonNotPayable, err, row.View())
	}
	if err != nil {
		return order.View{}, err
	}
	return row.View(), nil
}
