// Package compensation undoes what an order's saga did. None gives back the
// units of a PAID order; each is idempotent (retried until it succeeds).
package compensation

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

type Store interface {
	CloseOrder(ctx context.Context, o store.Order, c store.Closing) (store.CloseResult, error)
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
}

// Units is stock.Store.
type Units interface {
	Release(ctx context.Context, itemID int64, orderID string) (bool, error)
	Retire(ctx context.Context, itemID int64, orderID string) (bool, error)
}

// Counter is a Prometheus counter.
type Counter interface{ Inc() }

type Activities struct {
	store    Store
	units    Units
	retired  Counter
	refunded Counter
	pay      *Payments // nil: no provider (door)
}

// New returns the compensations with their counters.
func New(st Store, units Units, retired, refunded Counter) *Activities {
	return &Activities{store: st, units: units, retired: retired, refunded: refunded}
}

// ErrTypeNotDue: a timeout close came early by the database's clock (retried).
const ErrTypeNotDue = "NOT_DUE"

type CloseInput struct {
	OrderID string       `json:"order_id"`
	ItemID  int64        `json:"item_id"`
	UserID  int64        `json:"user_id"`
	Status  order.Status `json:"status"` // CANCELLED or FAILED
	Reason  string       `json:"reason"`
	Timeout bool         `json:"timeout,omitempty"` // close only once pay_by + order.PayGrace has passed
}

type CloseResult struct {
	Order    order.View `json:"order"`
	Restored bool       `json:"restored"`
	Recorded bool       `json:"recorded"`
}

// CloseOrder closes the order in one transaction; a PAID row wins.
func (c *Activities) CloseOrder(ctx context.Context, in CloseInput) (CloseResult, error) {
	closing := store.Closing{Status: in.Status, Reason: in.Reason}
	if in.Timeout {
		closing.AfterDeadline = order.PayGrace
	}
	res, err := c.store.CloseOrder(ctx, store.Order{OrderID: in.OrderID, UserID: in.UserID, ItemID: in.ItemID}, closing)
	if errors.Is(err, store.ErrNotDue) {
		return CloseResult{}, temporal.NewApplicationErrorWithOptions(err.Error(), ErrTypeNotDue,
			temporal.ApplicationErrorOptions{NextRetryDelay: time.Second})
	}
	if err != nil {
		return CloseResult{}, err
	}
	log := activity.GetLogger(ctx)
	if res.Refunded {
		c.refunded.Inc()
		log.Warn("order paid while QUEUED could not be completed: payment refunded", "order_id", in.OrderID, "reason", in.Reason)
	}
	switch {
	case !res.Recorded:
		log.Warn("order not recorded: the buyer holds another order for the item", "order_id", in.OrderID)
	case res.Order.Status != in.Status:
		log.Warn("order already final", "order_id", in.OrderID, "status", res.Order.Status, "wanted", in.Status)
	}
	log.Info("CloseOrder", "order_id", in.OrderID, "status", res.Order.Status, "restored", res.Restored)
	return CloseResult{Order: res.Order.View(), Restored: res.Restored, Recorded: res.Recorded}, nil
}

type ReleaseInput struct {
	OrderID string `json:"order_id"`
	ItemID  int64  `json:"item_id"`
}

// ReleaseUnit gives the reserved unit back in Redis (at most once; never a PAID order's).
func (c *Activities) ReleaseUnit(ctx context.Context, in ReleaseInput) (bool, error) {
	row, err := c.store.FindOrder(ctx, in.OrderID)
	if err != nil && !errors.Is(err, order.ErrNotFound) || row.Status == order.StatusPaid {
		return false, err
	}
	released, err := c.units.Release(ctx, in.ItemID, in.OrderID)
	if err != nil {
		return false, err
	}
	activity.GetLogger(ctx).Info("ReleaseUnit", "order_id", in.OrderID, "item_id", in.ItemID, "released", released)
	return released, nil
}

// RetireUnit ends a reservation whose unit the stock row never had, off sale.
func (c *Activities) RetireUnit(ctx context.Context, in ReleaseInput) (bool, error) {
	retired, err := c.units.Retire(ctx, in.ItemID, in.OrderID)
	if err != nil {
		return false, err
	}
	if retired {
		c.retired.Inc()
		activity.GetLogger(ctx).Warn("phantom unit retired: Redis reserved a unit the stock row did not have",
			"order_id", in.OrderID, "item_id", in.ItemID)
	}
	return retired, nil
}
