package stock

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
)

// AddUnits puts n more units on sale, at most once per addID, reporting
// whether the stock is loaded (when not, nothing is written). Callers run it
// inside store.Store.AddStock and, if that did not commit, call UndoAdd while
// they hold the stock row (a fenced Recount forgets recorded adds).
func (s *Store) AddUnits(ctx context.Context, itemID int64, addID string, n int64) (loaded bool, err error) {
	k := s.ItemKeys(itemID)
	v, err := addScript.Run(ctx, s.rdb, []string{k.Stock, k.Adds, k.Short}, addID, n).Int64()
	if err != nil {
		return false, fmt.Errorf("add %d units to item %d: %w", n, itemID, err)
	}
	return v != -1, nil
}

// UndoAdd takes back the units of an add, at most once, reporting whether it did.
func (s *Store) UndoAdd(ctx context.Context, itemID int64, addID string) (bool, error) {
	k := s.ItemKeys(itemID)
	v, err := unaddScript.Run(ctx, s.rdb, []string{k.Stock, k.Adds, k.Short}, addID).Int64()
	if err != nil {
		return false, fmt.Errorf("undo add %s of item %d: %w", addID, itemID, err)
	}
	return v == 1, nil
}

// AnnounceItem tells every API instance that an item's sale data changed and
// returns its new revision; unitsBack clears the sold-out flags too.
func (s *Store) AnnounceItem(ctx context.Context, itemID int64, unitsBack bool) (int64, error) {
	k := s.ItemKeys(itemID)
	var rev *redis.IntCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		rev = p.Incr(ctx, k.Rev)
		p.Publish(ctx, keyspace.ItemEvents(s.prefix), itemID)
		if unitsBack {
			p.Publish(ctx, keyspace.StockEvents(s.prefix), itemID)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("announce item %d: %w", itemID, err)
	}
	return rev.Val(), nil
}

// WatchItems calls fn with the id of every item whose sale data changed,
// until ctx ends (Pulses' revisions catch up what a reconnect loses).
func (s *Store) WatchItems(ctx context.Context, fn func(itemID int64)) {
	watchIDs(ctx, s.rdb, keyspace.ItemEvents(s.prefix), fn)
}

// Pulse is an item's live figures in Redis.
type Pulse struct {
	Left   int64 // stock_left
	Loaded bool  // false when the stock key is missing
	Rev    int64 // the item's sale-data revision (0 when never changed)
	Marks  int64 // buyers holding a mark: every 202 the item ever answered
	Outbox int64 // reservations not yet published to RocketMQ
}

func (s *Store) Pulses(ctx context.Context, itemIDs []int64) (map[int64]Pulse, error) {
	type cmds struct {
		left, rev     *redis.StringCmd
		marks, outbox *redis.IntCmd
	}
	cs, err := perItem(ctx, s, itemIDs, func(p redis.Pipeliner, k keyspace.Item) cmds {
		return cmds{left: p.Get(ctx, k.Stock), rev: p.Get(ctx, k.Rev), marks: p.HLen(ctx, k.Buyers), outbox: p.XLen(ctx, k.Outbox)}
	})
	if err != nil {
		return nil, fmt.Errorf("read the figures of %d items: %w", len(itemIDs), err)
	}
	out := make(map[int64]Pulse, len(itemIDs))
	for i, c := range cs {
		var p Pulse
		if n, err := c.left.Int64(); err == nil {
			p.Left, p.Loaded = n, true
		}
		p.Rev, _ = c.rev.Int64()
		p.Marks, p.Outbox = c.marks.Val(), c.outbox.Val()
		out[itemIDs[i]] = p
	}
	return out, nil
}

// MarkedBuyers returns the buyers holding a mark for the item, or ok false
// when there are more than max. HSCAN: a mark made meanwhile may be missing.
func (s *Store) MarkedBuyers(ctx context.Context, itemID int64, max int64) (users map[int64]struct{}, ok bool, err error) {
	key := s.ItemKeys(itemID).Buyers
	n, err := s.rdb.HLen(ctx, key).Result()
	if err != nil {
		return nil, false, fmt.Errorf("count buyer marks of item %d: %w", itemID, err)
	}
	if n > max {
		return nil, false, nil
	}
	users = make(map[int64]struct{}, n)
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, key, cursor, "", 2048).Result()
		if err != nil {
			return nil, false, fmt.Errorf("scan buyer marks of item %d: %w", itemID, err)
		}
		for i := 0; i < len(kv); i += 2 {
			if u, err := strconv.ParseInt(kv[i], 10, 64); err == nil {
				users[u] = struct{}{}
			}
		}
		if next == 0 {
			return users, true, nil
		}
		cursor = next
	}
}

// BuyerOrders returns the order id the buyer holds for each item that has one.
func (s *Store) BuyerOrders(ctx context.Context, itemIDs []int64, userID int64) (map[int64]string, error) {
	u := strconv.FormatInt(userID, 10)
	cmds, err := perItem(ctx, s, itemIDs, func(p redis.Pipeliner, k keyspace.Item) *redis.StringCmd {
		return p.HGet(ctx, k.Buyers, u)
	})
	if err != nil {
		return nil, fmt.Errorf("read the marks of buyer %d: %w", userID, err)
	}
	out := make(map[int64]string)
	for i, c := range cmds {
		if id, err := c.Result(); err == nil {
			out[itemIDs[i]] = id
		}
	}
	return out, nil
}
