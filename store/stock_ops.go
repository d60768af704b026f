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

// DeductStock's outcomes other than success. ErrVersionConflict: every
// optimistic attempt lost to a concurrent writer (a retry later may succeed);
// ErrOrderClosed: the order row is final or missing (someone else decided).
var (
	ErrStockExhausted  = errors.New("stock row exhausted")
	ErrVersionConflict = errors.New("stock version conflict")
	ErrOrderClosed     = errors.New("order already closed")

	errVersionMiss     = errors.New("version miss")
	errAlreadyDeducted = errors.New("already deducted")
)

const deductAttempts = 50

// DeductStock takes one unit from the item's stock row for the order and
// makes the order PENDING_PAYMENT (or PAID, when paid while QUEUED) with its
// deadline (the row's, else now + window by the database's clock), at most
// once per order: the conditional decrement, the order's stock_deduction
// marker (primary key order_id) and the order's move are one transaction, so
// a retry changes nothing and PENDING_PAYMENT always means "holds a stock-row
// unit". deducted is false when the order had already deducted.
func (s *Store) DeductStock(ctx context.Context, orderID string, itemID int64, window time.Duration) (_ Order, deducted bool, err error) {
	// Every order of a sale decrements the same row. Concurrent optimistic
	// writers from one process would mostly lose to each other (N writers:
	// ~1/N succeed per round, the rest re-read and pause); taking turns in
	// the process keeps the optimistic check for writers of other processes
	// and makes a version miss the exception here.
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
		// Read outside the transaction: the version check in the UPDATE is
		// what makes the write safe, and the row lock is held only for the
		// UPDATE and the two writes after it.
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
			// An order paid at the door while QUEUED (paid_at) becomes PAID
			// here, with its unit: no row claims a unit it does not hold.
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
// to the stock row, inside tx; false when there is no unrestored marker.
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
