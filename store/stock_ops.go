package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// DeductStock's refusals. ErrVersionConflict: every optimistic attempt lost
// (a later retry may succeed); ErrOrderClosed: the order row is final or missing.
var (
	ErrStockExhausted  = errors.New("stock row exhausted")
	ErrVersionConflict = errors.New("stock version conflict")
	ErrOrderClosed     = errors.New("order already closed")

	errVersionMiss     = errors.New("version miss")
	errAlreadyDeducted = errors.New("already deducted")
)

const deductAttempts = 50

// DeductStock takes one unit from the stock row for the order and makes it
// PENDING_PAYMENT (PAID when paid while QUEUED) with its deadline (else now +
// window), at most once: the decrement, the stock_deduction marker and the
// order's move are one transaction. deducted is false when it had already.
func (s *Store) DeductStock(ctx context.Context, orderID string, itemID int64, window time.Duration) (_ Order, deducted bool, err error) {
	// Optimistic writers of one row in one process would mostly lose to each
	// other: they take turns; the version check guards against other processes.
	unlock, err := s.rows.lock(ctx, itemID)
	if err != nil {
		return Order{}, false, err
	}
	defer unlock()
	db := s.db.WithContext(ctx)
	already := func() (Order, bool, error) {
		row, err := orderRow(db, orderID)
		return row, false, err
	}
	for attempt := 1; ; attempt++ {
		// Read outside the transaction: the UPDATE's version check makes it safe.
		st, err := stockRow(db.Select("stock", "version"), itemID)
		if err != nil {
			return Order{}, false, err
		}
		if st.Stock <= 0 {
			// A retry of an order that did deduct must not read as exhausted.
			var n int64
			if err := db.Model(&StockDeduction{}).Where("order_id = ?", orderID).Count(&n).Error; err != nil {
				return Order{}, false, fmt.Errorf("read deduction of order %s: %w", orderID, err)
			}
			if n > 0 {
				return already()
			}
			return Order{}, false, fmt.Errorf("item %d: %w", itemID, ErrStockExhausted)
		}
		err = db.Transaction(func(tx *gorm.DB) error {
			res := tx.Exec("UPDATE stock SET stock = stock - 1, version = version + 1 WHERE item_id = ? AND version = ? AND stock > 0",
				itemID, st.Version)
			if res.Error != nil {
				return fmt.Errorf("decrement stock of item %d: %w", itemID, res.Error)
			}
			if res.RowsAffected == 0 {
				return errVersionMiss
			}
			err := tx.Exec("INSERT INTO stock_deduction (order_id, item_id) VALUES (?, ?)", orderID, itemID).Error
			if isDuplicate(err) {
				return errAlreadyDeducted // rolls the decrement back
			}
			if err != nil {
				return fmt.Errorf("insert deduction of order %s: %w", orderID, err)
			}
			// Paid at the door while QUEUED: PAID here, with its unit.
			res = tx.Exec(`UPDATE seckill_order SET status = IF(paid_at IS NULL, ?, ?),
				pay_by = COALESCE(pay_by, NOW(3) + INTERVAL ? MICROSECOND)
				WHERE order_id = ? AND status IN (?, ?)`,
				order.StatusPendingPayment, order.StatusPaid, window.Microseconds(), orderID,
				order.StatusQueued, order.StatusPendingPayment)
			if res.Error != nil {
				return fmt.Errorf("order %s to %s: %w", orderID, order.StatusPendingPayment, res.Error)
			}
			if res.RowsAffected == 0 {
				return ErrOrderClosed // rolls the decrement and the marker back
			}
			return nil
		})
		switch {
		case err == nil:
			row, err := orderRow(db, orderID)
			return row, true, err
		case errors.Is(err, errAlreadyDeducted):
			return already()
		case errors.Is(err, ErrOrderClosed):
			row, rerr := orderRow(db, orderID)
			if rerr != nil && !errors.Is(rerr, order.ErrNotFound) {
				return Order{}, false, rerr
			}
			return row, false, fmt.Errorf("order %s is %s: %w", orderID, row.Status, ErrOrderClosed)
		case !errors.Is(err, errVersionMiss):
			return Order{}, false, err
		case attempt >= deductAttempts:
			return Order{}, false, fmt.Errorf("item %d after %d attempts: %w", itemID, attempt, ErrVersionConflict)
		}
		pause := time.Duration(1+rand.IntN(4*min(attempt, 10))) * time.Millisecond
		select {
		case <-ctx.Done():
			return Order{}, false, ctx.Err()
		case <-time.After(pause):
		}
	}
}

// rowLocks serializes this process's writers of one stock row.
type rowLocks struct{ items sync.Map } // item id -> chan struct{} (capacity 1)

func (l *rowLocks) lock(ctx context.Context, itemID int64) (func(), error) {
	v, _ := l.items.LoadOrStore(itemID, make(chan struct{}, 1))
	ch := v.(chan struct{})
	select {
	case ch <- struct{}{}:
		return func() { <-ch }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// restoreDeduction flips the order's deduction marker and gives its unit back
// to the stock row; false when there is no unrestored marker.
func restoreDeduction(tx *gorm.DB, orderID string) (bool, error) {
	res := tx.Exec("UPDATE stock_deduction SET restored = TRUE WHERE order_id = ? AND restored = FALSE", orderID)
	if res.Error != nil {
		return false, fmt.Errorf("mark deduction of order %s restored: %w", orderID, res.Error)
	}
	if res.RowsAffected == 0 {
		return false, nil // never deducted, or already restored
	}
	res = tx.Exec(`UPDATE stock s JOIN stock_deduction d ON s.item_id = d.item_id
		SET s.stock = s.stock + 1, s.version = s.version + 1 WHERE d.order_id = ?`, orderID)
	if res.Error != nil {
		return false, fmt.Errorf("restore stock for order %s: %w", orderID, res.Error)
	}
	if res.RowsAffected != 1 {
		return false, fmt.Errorf("restore stock for order %s: stock row missing", orderID)
	}
	return true, nil
}
