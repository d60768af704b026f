package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// The sale controls' refusals (ErrSaleEnded: by the database's clock).
var (
	ErrSaleEnded     = errors.New("sale already ended")
	ErrStockTooLarge = errors.New("stock_total would exceed its maximum")
	ErrAddKeyReused  = errors.New("idempotency key already used for an add of another number of units")
)

// MaxStockTotal is the most units an item may ever have (INT columns).
const MaxStockTotal = 2_000_000_000

// CreateItem inserts the item and its stock row in one transaction.
func (s *Store) CreateItem(ctx context.Context, it Item) (Item, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		omit := []string{"id", "created_at"}
		if it.Currency == "" {
			omit = append(omit, "currency")
		}
		if err := tx.Omit(omit...).Create(&it).Error; err != nil {
			return fmt.Errorf("insert item: %w", err)
		}
		if err := tx.Create(&Stock{ItemID: it.ID, Stock: it.StockTotal}).Error; err != nil {
			return fmt.Errorf("insert stock row: %w", err)
		}
		return nil
	})
	if err != nil {
		return Item{}, err
	}
	return s.GetItem(ctx, it.ID)
}

// GetItem reads one item (order.ErrItemNotFound when there is none).
func (s *Store) GetItem(ctx context.Context, id int64) (Item, error) {
	return itemRow(s.db.WithContext(ctx), id)
}

func itemRow(db *gorm.DB, id int64) (Item, error) {
	return take[Item](db, order.ErrItemNotFound, "item "+strconv.FormatInt(id, 10), "id = ?", id)
}

func stockRow(db *gorm.DB, itemID int64) (Stock, error) {
	return take[Stock](db, order.ErrItemNotFound, "stock row of item "+strconv.FormatInt(itemID, 10), "item_id = ?", itemID)
}

func (s *Store) ListItems(ctx context.Context) ([]Item, error) {
	var items []Item
	if err := s.db.WithContext(ctx).Order("id DESC").Find(&items).Error; err != nil {
		return nil, fmt.Errorf("list items: %w", err)
	}
	return items, nil
}

// EndSale ends the sale now by the database's clock (a start_at still ahead
// moves before it), recording key; the UPDATE's row lock orders it with
// AddStock. An ended item is returned with ErrSaleEnded: the first end stands.
func (s *Store) EndSale(ctx context.Context, itemID int64, key string) (Item, error) {
	res := s.db.WithContext(ctx).Exec(`UPDATE item SET end_at = NOW(3), end_key = NULLIF(?, ''),
		start_at = LEAST(start_at, NOW(3) - INTERVAL 1000 MICROSECOND)
		WHERE id = ? AND end_at > NOW(3)`, key, itemID)
	if res.Error != nil {
		return Item{}, fmt.Errorf("end sale of item %d: %w", itemID, res.Error)
	}
	it, err := s.GetItem(ctx, itemID)
	if err != nil {
		return Item{}, err
	}
	if res.RowsAffected == 0 {
		return it, fmt.Errorf("item %d ended at %s: %w", itemID, it.EndAt.UTC().Format(time.RFC3339Nano), ErrSaleEnded)
	}
	return it, nil
}

// AddStock adds n units to stock_total and the stock row and records the add,
// in one transaction holding the item and stock row locks, which commits only
// if inRedis (stock.Store.AddUnits) succeeds: a stock-row writer sees neither
// side or both. Idempotent by key when not "" (ErrAddKeyReused: other units).
func (s *Store) AddStock(ctx context.Context, itemID, n int64, key, addID string,
	inRedis func(ctx context.Context, it Item) error) (out Item, replayed bool, err error) {
	err = s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		it, err := itemRow(forUpdate(tx), itemID)
		if err != nil {
			return err
		}
		if key != "" {
			var prev []StockAdd
			if err := tx.Where("item_id = ? AND idempotency_key = ?", itemID, key).Limit(1).Find(&prev).Error; err != nil {
				return fmt.Errorf("look up add key of item %d: %w", itemID, err)
			}
			if len(prev) == 1 {
				if prev[0].Units != n {
					return fmt.Errorf("item %d: key applied to an add of %d units, not %d: %w", itemID, prev[0].Units, n, ErrAddKeyReused)
				}
				it.StockTotal = prev[0].StockTotal // what the first add left
				out, replayed = it, true
				return nil
			}
		}
		var ended bool
		if err := tx.Raw("SELECT ? <= NOW(3)", it.EndAt).Scan(&ended).Error; err != nil {
			return fmt.Errorf("read the clock: %w", err)
		}
		if ended {
			return fmt.Errorf("item %d ended at %s: %w", itemID, it.EndAt.UTC().Format(time.RFC3339Nano), ErrSaleEnded)
		}
		if it.StockTotal+n > MaxStockTotal {
			return fmt.Errorf("item %d has %d units, %d more: %w", itemID, it.StockTotal, n, ErrStockTooLarge)
		}
		if err := tx.Exec("UPDATE item SET stock_total = stock_total + ? WHERE id = ?", n, itemID).Error; err != nil {
			return fmt.Errorf("raise stock_total of item %d: %w", itemID, err)
		}
		res := tx.Exec("UPDATE stock SET stock = stock + ?, version = version + 1 WHERE item_id = ?", n, itemID)
		if res.Error != nil {
			return fmt.Errorf("raise stock row of item %d: %w", itemID, res.Error)
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("stock row of item %d: %w", itemID, order.ErrItemNotFound)
		}
		it.StockTotal += n
		row := StockAdd{AddID: addID, ItemID: itemID, Units: n, StockTotal: it.StockTotal}
		if key != "" {
			row.Key = &key
		}
		if err := tx.Create(&row).Error; err != nil {
			return fmt.Errorf("record add %s of item %d: %w", addID, itemID, err)
		}
		if err := inRedis(ctx, it); err != nil {
			return err
		}
		out = it
		return nil
	})
	return out, replayed, err
}

// AddApplied reports whether the add committed (asked under FenceStock).
func (s *Store) AddApplied(ctx context.Context, addID string) (bool, error) {
	var n int64
	if err := s.db.WithContext(ctx).Model(&StockAdd{}).Where("add_id = ?", addID).Count(&n).Error; err != nil {
		return false, fmt.Errorf("look up add %s: %w", addID, err)
	}
	return n == 1, nil
}

// ItemState is what MySQL holds about one item's sale, read in one snapshot.
type ItemState struct {
	Item       Item
	Stock      Stock
	Orders     []Order
	Deductions []StockDeduction
	Payments   []Payment
	Refunds    []Refund // of the item's payments or orders
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

// ReadItemState reads in one read-only REPEATABLE READ transaction (one snapshot).
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
		if err := tx.Where("item_id = ?", itemID).Find(&st.Payments).Error; err != nil {
			return fmt.Errorf("read payments of item %d: %w", itemID, err)
		}
		if err := tx.Raw("SELECT * FROM refunds WHERE payment_id IN (SELECT id FROM payments WHERE item_id = ?) "+
			"OR order_id IN (SELECT order_id FROM seckill_order WHERE item_id = ?) ORDER BY id", itemID, itemID).Scan(&st.Refunds).Error; err != nil {
			return fmt.Errorf("read refunds of item %d: %w", itemID, err)
		}
		return nil
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	return st, err
}

// ActiveItems lists the items that have started and are live or ended within since.
func (s *Store) ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error) {
	var ids []int64
	err := s.db.WithContext(ctx).Model(&Item{}).Where("start_at <= ? AND end_at >= ?", now.UTC(), now.Add(-since).UTC()).
		Order("id").Pluck("id", &ids).Error
	if err != nil {
		return nil, fmt.Errorf("list active items: %w", err)
	}
	return ids, nil
}

// WithHeldOrder runs fn while the order's row is locked and holds a unit, so
// a repair on that premise cannot race a close; ran is false otherwise.
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

func (s *Store) HeldOrders(ctx context.Context, itemID int64) ([]Order, error) {
	var rows []Order
	err := s.db.WithContext(ctx).Where("item_id = ? AND status IN ?", itemID,
		[]order.Status{order.StatusQueued, order.StatusPendingPayment, order.StatusPaid}).Find(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("read held orders of item %d: %w", itemID, err)
	}
	return rows, nil
}

// FenceStock runs fn while the stock row is locked, with the row and the
// unrestored deductions under the lock: deducted if the version is still
// seen's, else read again (moved true).
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
