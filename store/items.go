package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// CreateItem inserts the item and its stock row in one transaction and
// returns the item with its id.
func (s *Store) CreateItem(ctx context.Context, it Item) (Item, error) {
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Omit("id", "created_at").Create(&it).Error; err != nil {
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

// GetItem reads one item; ErrNotFound when there is none.
func (s *Store) GetItem(ctx context.Context, id int64) (Item, error) {
	var it Item
	err := s.db.WithContext(ctx).Where("id = ?", id).Take(&it).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Item{}, fmt.Errorf("item %d: %w", id, ErrItemNotFound)
	}
	if err != nil {
		return Item{}, fmt.Errorf("get item %d: %w", id, err)
	}
	return it, nil
}

// ListItems returns every item, newest first (the API's cache loads them).
func (s *Store) ListItems(ctx context.Context) ([]Item, error) {
	var items []Item
	if err := s.db.WithContext(ctx).Order("id DESC").Find(&items).Error; err != nil {
		return nil, fmt.Errorf("list items: %w", err)
	}
	return items, nil
}

// GetStock reads an item's stock row.
func (s *Store) GetStock(ctx context.Context, itemID int64) (Stock, error) {
	var st Stock
	err := s.db.WithContext(ctx).Where("item_id = ?", itemID).Take(&st).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return Stock{}, fmt.Errorf("stock of item %d: %w", itemID, ErrNotFound)
	}
	if err != nil {
		return Stock{}, fmt.Errorf("get stock of item %d: %w", itemID, err)
	}
	return st, nil
}

// ListItemEnds returns every item's id with the end of its sale (the relay's
// discovery: readers of closed items retire).
func (s *Store) ListItemEnds(ctx context.Context) (map[int64]time.Time, error) {
	var rows []struct {
		ID    int64     `gorm:"column:id"`
		EndAt time.Time `gorm:"column:end_at"`
	}
	if err := s.db.WithContext(ctx).Model(&Item{}).Select("id", "end_at").Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("list item ends: %w", err)
	}
	out := make(map[int64]time.Time, len(rows))
	for _, r := range rows {
		out[r.ID] = r.EndAt
	}
	return out, nil
}
