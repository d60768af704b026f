// Package compensation undoes what an order's saga did when payment times
// out, the buyer cancels or a forward step fails for good: RestoreStock,
// MarkOrder and ReleaseUnit, run in reverse of the forward steps by Saga in a
// disconnected context. Each is idempotent and says how, because each is
// retried until it succeeds. DeadLetter applies the same undo to an order
// whose saga never started.
package compensation

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Store is the database side of the compensations.
type Store interface {
	RestoreStock(ctx context.Context, orderID string) (bool, error)
	CloseOrder(ctx context.Context, o store.Order, status order.Status, reason string) (store.Order, bool, error)
	FailUnstartedOrder(ctx context.Context, o store.Order, reason string) (store.Order, store.FailOutcome, error)
}

// Units is the Redis side: the reserved unit and the published status
// (stock.Store).
type Units interface {
	Release(ctx context.Context, itemID int64, orderID string) (bool, error)
	PublishStatus(ctx context.Context, v order.View) error
}

// Activities are the compensations; the workflow refers to them through a
// typed nil pointer and the worker registers one with real dependencies.
type Activities struct {
	store Store
	units Units
}

// New returns the compensations.
func New(st Store, units Units) *Activities { return &Activities{store: st, units: units} }

// RestoreInput names the order whose stock-row unit goes back.
type RestoreInput struct {
	OrderID string `json:"order_id"`
}

// RestoreStock gives the order's unit back to the stock row, only if its
// stock_deduction marker exists and is not restored yet (marker flip and
// increment in one transaction). It reports whether this call restored it.
func (c *Activities) RestoreStock(ctx context.Context, in RestoreInput) (bool, error) {
	restored, err := c.store.RestoreStock(ctx, in.OrderID)
	if err != nil {
		return false, err
	}
	activity.GetLogger(ctx).Info("RestoreStock", "order_id", in.OrderID, "restored", restored)
	return restored, nil
}

// MarkInput is the final status to record and why.
type MarkInput struct {
	OrderID string       `json:"order_id"`
	ItemID  int64        `json:"item_id"`
	UserID  int64        `json:"user_id"`
	Status  order.Status `json:"status"` // CANCELLED or FAILED
	Reason  string       `json:"reason"`
}

// MarkOrder records the order as CANCELLED or FAILED with the reason: an open
// row is updated, a missing row inserted (so an order whose PersistOrder failed
// is still recorded when it can be), a final row left as it is. It returns the
// view to publish.
func (c *Activities) MarkOrder(ctx context.Context, in MarkInput) (order.View, error) {
	row, recorded, err := c.store.CloseOrder(ctx, store.Order{OrderID: in.OrderID, UserID: in.UserID, ItemID: in.ItemID},
		in.Status, in.Reason)
	if err != nil {
		return order.View{}, err
	}
	log := activity.GetLogger(ctx)
	if !recorded {
		log.Warn("order not recorded: the buyer holds another order for the item", "order_id", in.OrderID)
	} else if row.Status != in.Status {
		log.Warn("order already final", "order_id", in.OrderID, "status", row.Status, "wanted", in.Status)
	}
	return row.View(), nil
}

// ReleaseInput names the reserved unit in Redis.
type ReleaseInput struct {
	OrderID string `json:"order_id"`
	ItemID  int64  `json:"item_id"`
}

// ReleaseUnit gives the reserved unit back in Redis: the reservation removed,
// stock up by one, sold-out flags cleared through the stock events channel.
// The release script acts only while the reservation exists, so a repeated
// release never adds a unit twice. The buyer's mark stays.
func (c *Activities) ReleaseUnit(ctx context.Context, in ReleaseInput) (bool, error) {
	released, err := c.units.Release(ctx, in.ItemID, in.OrderID)
	if err != nil {
		return false, err
	}
	activity.GetLogger(ctx).Info("ReleaseUnit", "order_id", in.OrderID, "item_id", in.ItemID, "released", released)
	return released, nil
}
