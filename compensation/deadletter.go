package compensation

import (
	"context"
	"fmt"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Dead-letter outcomes (the worker counts them by these labels).
const (
	DeadLetterFailed      = "failed"        // recorded FAILED (or could not be recorded) and the unit released
	DeadLetterOwnedBySaga = "owned_by_saga" // a saga persisted the order first; it owns the unit
)

// ReasonDeadLetter prefixes the reason recorded for a dead-lettered order.
const ReasonDeadLetter = "SAGA_NOT_STARTED"

// DeadLetter undoes an order whose message ended in the dead-letter topic: its
// saga never started, so nothing but the Redis reservation exists.
type DeadLetter struct {
	store Store
	units Units
}

// NewDeadLetter returns the dead-letter compensation.
func NewDeadLetter(st Store, units Units) *DeadLetter { return &DeadLetter{store: st, units: units} }

// Handle records the order FAILED with the reason, releases its unit and
// publishes the status. The order_id unique key decides between this and a
// saga that started after all: if the saga wrote the row first it owns the
// unit and Handle changes nothing. Every step is idempotent, so a redelivered
// dead letter is safe; an error asks for redelivery.
func (d *DeadLetter) Handle(ctx context.Context, m order.Message, deliveries int32) (string, error) {
	reason := fmt.Sprintf("%s: order message dead-lettered after %d deliveries", ReasonDeadLetter, deliveries)
	row, outcome, err := d.store.FailUnstartedOrder(ctx, store.Order{OrderID: m.OrderID, UserID: m.UserID, ItemID: m.ItemID}, reason)
	if err != nil {
		return "", err
	}
	if outcome == store.FailOwnedBySaga {
		return DeadLetterOwnedBySaga, nil
	}
	if _, err := d.units.Release(ctx, m.ItemID, m.OrderID); err != nil {
		return "", err
	}
	if err := d.units.PublishStatus(ctx, row.View()); err != nil {
		return "", err
	}
	return DeadLetterFailed, nil
}
