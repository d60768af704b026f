package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// FindOrder reads an order by its public order id; ErrNotFound when there is
// none (the API's GET order falls back to it once the Redis status expired).
func (s *Store) FindOrder(ctx context.Context, orderID string) (Order, error) {
	var o Order
	err := s.db.WithContext(ctx).Where("order_id = ?", orderID).Take(&o).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Order{}, fmt.Errorf("order %s: %w", orderID, ErrOrderNotFound)
	}
	if err != nil {
		return Order{}, fmt.Errorf("find order %s: %w", orderID, err)
	}
	return o, nil
}

// CountOrders counts the orders of each item by status, in one query over
// the (item_id, status) index: no row is read. Items without orders are
// absent from the map.
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
		m := out[r.ItemID]
		if m == nil {
			m = make(map[order.Status]int64)
			out[r.ItemID] = m
		}
		m[r.Status] = r.N
	}
	return out, nil
}
