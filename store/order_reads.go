package store

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// FindOrder reads an order by its order id (order.ErrNotFound when none).
func (s *Store) FindOrder(ctx context.Context, orderID string) (Order, error) {
	return orderRow(s.db.WithContext(ctx), orderID)
}

func orderRow(db *gorm.DB, orderID string) (Order, error) {
	return take[Order](db, order.ErrNotFound, "order "+orderID, "order_id = ?", orderID)
}

// ListUserOrders returns up to limit of a buyer's orders, newest first (ULID
// order), those with an order id below before when it is not empty.
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

// CountOrders counts the orders of each item by status (an index-only
// query). Items without orders are absent.
func (s *Store) CountOrders(ctx context.Context, itemIDs []int64) (map[int64]map[order.Status]int64, error) {
	out := make(map[int64]map[order.Status]int64, len(itemIDs))
	if len(itemIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		ItemID int64
		Status order.Status
		N      int64
	}
	err := s.db.WithContext(ctx).Raw("SELECT item_id, status, COUNT(*) AS n FROM seckill_order WHERE item_id IN ? GROUP BY item_id, status",
		itemIDs).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count orders of %d items: %w", len(itemIDs), err)
	}
	for _, r := range rows {
		if out[r.ItemID] == nil {
			out[r.ItemID] = make(map[order.Status]int64)
		}
		out[r.ItemID][r.Status] = r.N
	}
	return out, nil
}
