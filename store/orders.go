package store

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// The saga's writes to seckill_order. Each is idempotent on order_id (the
// unique key uk_order_order_id) and moves a row only forward: QUEUED or
// PENDING_PAYMENT to a final status, never out of one.

// CreatePendingOrder inserts o as PENDING_PAYMENT. When a row with the same
// order_id already exists (a retry after a lost reply, or a row recorded by
// someone else) it returns that row unchanged: the caller looks at its status.
// When the buyer already holds another order for the item
// (uk_order_user_item) it returns ErrDuplicate.
func (s *Store) CreatePendingOrder(ctx context.Context, o Order) (Order, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o.ID, o.Status, o.Reason, o.CreatedAt, o.UpdatedAt = 0, order.StatusPendingPayment, "", now, now
	err := s.db.WithContext(ctx).Omit("id").Create(&o).Error
	if err == nil {
		return o, nil
	}
	if !isDuplicate(err) {
		return Order{}, fmt.Errorf("insert order %s: %w", o.OrderID, err)
	}
	existing, err := orderRow(s.db.WithContext(ctx), o.OrderID)
	if errors.Is(err, ErrNotFound) {
		return Order{}, fmt.Errorf("buyer %d already has another order for item %d: %w", o.UserID, o.ItemID, ErrDuplicate)
	}
	return existing, err
}

// SetOrderPaid moves a PENDING_PAYMENT order to PAID. Paying a PAID order
// again succeeds; any other status is order.ErrNotPayable.
func (s *Store) SetOrderPaid(ctx context.Context, orderID string) (Order, error) {
	db := s.db.WithContext(ctx)
	res := db.Exec("UPDATE seckill_order SET status = ?, reason = '' WHERE order_id = ? AND status = ?",
		order.StatusPaid, orderID, order.StatusPendingPayment)
	if res.Error != nil {
		return Order{}, fmt.Errorf("mark order %s paid: %w", orderID, res.Error)
	}
	o, err := orderRow(db, orderID)
	if err != nil {
		return Order{}, err
	}
	if o.Status != order.StatusPaid {
		return o, fmt.Errorf("order %s is %s: %w", orderID, o.Status, order.ErrNotPayable)
	}
	return o, nil
}

// CloseOrder records a final status (CANCELLED or FAILED) with its reason:
// an open row (QUEUED, PENDING_PAYMENT) is updated, a missing row is
// inserted, a row that is already final is returned unchanged (the first
// final status wins). recorded is false only when no row can hold this order
// because the buyer's (user_id, item_id) belongs to another order id.
func (s *Store) CloseOrder(ctx context.Context, o Order, status order.Status, reason string) (_ Order, recorded bool, _ error) {
	if status != order.StatusCancelled && status != order.StatusFailed {
		return Order{}, false, fmt.Errorf("close order %s: %s is not a closing status", o.OrderID, status)
	}
	reason = clip(reason, 512)
	db := s.db.WithContext(ctx)
	res := db.Exec("UPDATE seckill_order SET status = ?, reason = ? WHERE order_id = ? AND status IN (?, ?)",
		status, reason, o.OrderID, order.StatusQueued, order.StatusPendingPayment)
	if res.Error != nil {
		return Order{}, false, fmt.Errorf("close order %s: %w", o.OrderID, res.Error)
	}
	row, err := orderRow(db, o.OrderID)
	if err == nil {
		return row, true, nil
	}
	if !errors.Is(err, ErrNotFound) {
		return Order{}, false, err
	}
	row, err = s.insertFinal(ctx, o, status, reason)
	if errors.Is(err, ErrDuplicate) {
		return Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: status, Reason: reason}, false, nil
	}
	return row, err == nil, err
}

// FailOutcome says what FailUnstartedOrder did.
type FailOutcome int

const (
	// FailRecorded: this call recorded the order as FAILED.
	FailRecorded FailOutcome = iota
	// FailAlreadyFailed: the order was already FAILED (a repeated call).
	FailAlreadyFailed
	// FailOwnedBySaga: a saga persisted the order (PENDING_PAYMENT, PAID or
	// CANCELLED); it owns the unit, nothing was changed.
	FailOwnedBySaga
	// FailNotRecordable: the buyer's (user_id, item_id) belongs to another
	// order id, so no row can hold this one; its reservation is still this
	// order's alone.
	FailNotRecordable
)

// FailUnstartedOrder records an order whose saga never started (its message
// ended in the dead-letter topic) as FAILED, unless a saga got to it first.
// The unique key on order_id arbitrates between the two: whichever writes the
// row first owns the order.
func (s *Store) FailUnstartedOrder(ctx context.Context, o Order, reason string) (Order, FailOutcome, error) {
	reason = clip(reason, 512)
	row, err := s.insertFinal(ctx, o, order.StatusFailed, reason)
	if err == nil {
		return row, FailRecorded, nil
	}
	if !errors.Is(err, ErrDuplicate) {
		return Order{}, 0, err
	}
	db := s.db.WithContext(ctx)
	res := db.Exec("UPDATE seckill_order SET status = ?, reason = ? WHERE order_id = ? AND status = ?",
		order.StatusFailed, reason, o.OrderID, order.StatusQueued)
	if res.Error != nil {
		return Order{}, 0, fmt.Errorf("fail order %s: %w", o.OrderID, res.Error)
	}
	row, err = orderRow(db, o.OrderID)
	switch {
	case errors.Is(err, ErrNotFound):
		return Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: order.StatusFailed, Reason: reason},
			FailNotRecordable, nil
	case err != nil:
		return Order{}, 0, err
	case res.RowsAffected == 1:
		return row, FailRecorded, nil
	case row.Status == order.StatusFailed:
		return row, FailAlreadyFailed, nil
	default:
		return row, FailOwnedBySaga, nil
	}
}

// insertFinal inserts o with a final status; ErrDuplicate when either unique
// key is taken.
func (s *Store) insertFinal(ctx context.Context, o Order, status order.Status, reason string) (Order, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	o.ID, o.Status, o.Reason, o.CreatedAt, o.UpdatedAt = 0, status, reason, now, now
	err := s.db.WithContext(ctx).Omit("id").Create(&o).Error
	if isDuplicate(err) {
		return Order{}, fmt.Errorf("insert order %s: %w", o.OrderID, ErrDuplicate)
	}
	if err != nil {
		return Order{}, fmt.Errorf("insert order %s: %w", o.OrderID, err)
	}
	return o, nil
}

// orderRow reads one order by order id with db (a pool or a transaction).
func orderRow(db *gorm.DB, orderID string) (Order, error) {
	var o Order
	err := db.Where("order_id = ?", orderID).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, fmt.Errorf("order %s: %w", orderID, ErrNotFound)
	}
	if err != nil {
		return Order{}, fmt.Errorf("read order %s: %w", orderID, err)
	}
	return o, nil
}

// clip shortens s to at most n characters (the reason column is VARCHAR(512)).
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
