package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// ErrSaleEnded: the item's sale has already ended (its end_at has passed by
// the database's clock); an operator cannot end it again or add units to it.
var ErrSaleEnded = errors.New("sale already ended")

// MaxStockTotal is the most units an item may ever have (stock_total and the
// stock row are INT columns).
const MaxStockTotal = 2_000_000_000

// ErrStockTooLarge: an add would take stock_total past MaxStockTotal.
var ErrStockTooLarge = errors.New("stock_total would exceed its maximum")

// EndSale ends the item's sale now, by the database's clock: end_at becomes
// NOW(3) (and a start_at still ahead becomes one millisecond before it, so
// start_at < end_at holds and the item reads ENDED, never UPCOMING). One
// conditional UPDATE on the item row, which takes its row lock: an AddStock
// in flight finishes first or sees the sale ended. An item whose end_at has
// already passed is left as it is and returned with ErrSaleEnded: ending is
// idempotent, the first end's end_at stands.
func (s *Store) EndSale(ctx context.Context, itemID int64) (Item, error) {
	db := s.db.WithContext(ctx)
	res := db.Exec(`UPDATE item SET end_at = NOW(3),
		start_at = LEAST(start_at, NOW(3) - INTERVAL 1000 MICROSECOND)
		WHERE id = ? AND end_at > NOW(3)`, itemID)
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

// AddStock adds n units to an item for sale: stock_total and the stock row
// (version + 1, so optimistic deductions in flight re-read it) in one
// transaction that locks the item row, then the stock row, in that order.
// inRedis runs inside the transaction after both writes, while both row locks
// are held, and the transaction commits only if it succeeds: the Redis side
// of the add (stock.Store.AddUnits) happens exactly while the rows are
// locked. A stock-row writer that locks the row (deductions, restores, a
// recount that holds the row while it writes Redis) therefore sees either
// neither side of the add or both. An ended sale is ErrSaleEnded; an unknown
// item ErrItemNotFound; nothing is written in either case.
func (s *Store) AddStock(ctx context.Context, itemID, n int64, inRedis func(ctx context.Context, it Item) error) (Item, error) {
	var out Item
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var it Item
		err := tx.Clauses(clause.Locking{Strength: "UPDATE"}).Where("id = ?", itemID).Take(&it).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return fmt.Errorf("item %d: %w", itemID, ErrItemNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock item %d: %w", itemID, err)
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
			return fmt.Errorf("stock row of item %d: %w", itemID, ErrNotFound)
		}
		it.StockTotal += n
		if inRedis != nil {
			if err := inRedis(ctx, it); err != nil {
				return err
			}
		}
		out = it
		return nil
	})
	if err != nil {
		return Item{}, err
	}
	return out, nil
}

// ListUserOrders returns a buyer's orders, newest first (order ids are ULIDs:
// ordered by creation time), those with an order id below before when it is
// not empty, at most limit.
func (s *Store) ListUserOrders(ctx context.Context, userID int64, before string, limit int) ([]Order, error) {
	q := s.db.WithContext(ctx).Where("user_id = ?", userID)
	if before != "" {
		q = q.Where("order_id < ?", before)
	}
	var rows []Order
	if err := q.Order("order_id DESC").Limit(limit).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list orders of buyer %d: %w", userID, err)
	}
	return rows, nil
}

// FindOrders reads the orders among ids that have a row, by order id.
func (s *Store) FindOrders(ctx context.Context, ids []string) (map[string]Order, error) {
	out := make(map[string]Order, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	var rows []Order
	if err := s.db.WithContext(ctx).Where("order_id IN ?", ids).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("find %d orders: %w", len(ids), err)
	}
	for _, o := range rows {
		out[o.OrderID] = o
	}
	return out, nil
}
