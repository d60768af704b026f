package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// ItemState is what MySQL holds about one item's sale, read in one snapshot.
type ItemState struct {
	Item       Item
	Stock      Stock
	Orders     []Order
	Deductions []StockDeduction
}

// Unrestored returns the order ids whose deduction holds a stock-row unit.
func (s ItemState) Unrestored() []string {
	var ids []string
	for _, d := range s.Deductions {
		if !d.Restored {
			ids = append(ids, d.OrderID)
		}
	}
	return ids
}

// ReadItemState reads in one read-only REPEATABLE READ transaction: every
// read comes from the snapshot the first one takes.
func (s *Store) ReadItemState(ctx context.Context, itemID int64) (ItemState, error) {
	var st ItemState
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var err error
		if st.Item, err = itemRow(tx, itemID); err != nil {
			return err
		}
		if st.Stock, err = stockRow(tx, itemID); err != nil {
			return err
		}
		if err := tx.Where("item_id = ?", itemID).Find(&st.Orders).Error; err != nil {
			return fmt.Errorf("read orders of item %d: %w", itemID, err)
		}
		if err := tx.Where("item_id = ?", itemID).Find(&st.Deductions).Error; err != nil {
			return fmt.Errorf("read deductions of item %d: %w", itemID, err)
		}
		return nil
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	return st, err
}

// ActiveItems lists the items whose sale has started and is live or ended
// within since.
func (s *Store) ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Model(&Item{}).Where("start_at <= ? AND end_at >= ?", now.UTC(), now.Add(-since).UTC()).
		Order("id").Pluck("id", &ids).Error
	if err != nil {
		return nil, fmt.Errorf("list active items: %w", err)
	}
	return ids, nil
}

// WithHeldOrder runs fn while the order's row is locked (FOR UPDATE) and
// holds a unit: no close commits until fn returns, so a repair on that
// premise cannot race the saga's compensation. ran is false when the row is
// missing or holds no unit.
func (s *Store) WithHeldOrder(ctx context.Context, orderID string, fn func(Order) error) (ran bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := orderRow(forUpdate(tx), orderID)
		if errors.Is(err, order.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !row.Status.Holds() {
			return nil
		}
		ran = true
		return fn(row)
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	return ran, err
}

// HeldOrders returns the item's orders that hold a unit: what a Redis that
// lost the item must hold a reservation for.
func (s *Store) HeldOrders(ctx context.Context, itemID int64) ([]Order, error) {
	var rows []Order
	err := s.db.WithContext(ctx).Where("item_id = ? AND status IN ?", itemID,
		[]order.Status{order.StatusQueued, order.StatusPendingPayment, order.StatusPaid}).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read held orders of item %d: %w", itemID, err)
	}
	return rows, nil
}

// FenceStock runs fn while the item's stock row is locked (FOR UPDATE), with
// the row and the unrestored deductions as they are under the lock: every
// change of either writes the row. If the row's version is still seen's,
// deducted (read with seen) is passed on; else the deductions are read again
// and moved is true.
func (s *Store) FenceStock(ctx context.Context, itemID int64, seen Stock, deducted []string,
	fn func(row Stock, deducted []string) error) (moved bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := stockRow(forUpdate(tx), itemID)
		if err != nil {
			return err
		}
		moved = row.Version != seen.Version
		if moved {
			deducted = nil
			if err := tx.Model(&StockDeduction{}).Where("item_id = ? AND restored = FALSE", itemID).
				Pluck("order_id", &deducted).Error; err != nil {
				return fmt.Errorf("read deductions of item %d: %w", itemID, err)
			}
		}
		return fn(row, deducted)
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	return moved, err
}
