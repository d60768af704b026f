package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
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
