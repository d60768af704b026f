package stock

import (
	_ "embed"

	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redisx"
)

// The sale controls' side of an item in Redis: its adds, its revision (API
// instances reload the item when it moves) and its end key.

//go:embed add.lua
var addLua string

//go:embed unadd.lua
var unaddLua string

var (
	addScript   = redis.NewScript(addLua)
	unaddScript = redis.NewScript(unaddLua)
)

// AddUnits puts n more units of an item on sale in Redis, at most once per
// addID (a client retry after a dropped connection finds its id and adds
// nothing). It reports whether the item's stock is loaded: when it is not,
// nothing is written (the next load derives it from the stock row, which
// holds the units). Callers run it inside the MySQL transaction that adds
// the units to the stock row (store.Store.AddStock), and call UndoAdd with
// the same id if that transaction does not commit.
func (s *Store) AddUnits(ctx context.Context, itemID int64, addID string, n int64) (loaded bool, err error) {
	k := s.ItemKeys(itemID)
	v, err := addScript.Run(ctx, s.rdb, []string{k.Stock, k.Adds}, addID, n).Int64()
	if err != nil {
		return false, fmt.Errorf("add %d units to item %d: %w", n, itemID, err)
	}
	return v != -1, nil
}

// UndoAdd takes back the units of an add whose MySQL transaction failed,
// only if that add was applied and not undone yet. It reports whether it
// took them back.
func (s *Store) UndoAdd(ctx context.Context, itemID int64, addID string) (bool, error) {
	k := s.ItemKeys(itemID)
	v, err := unaddScript.Run(ctx, s.rdb, []string{k.Stock, k.Adds}, addID).Int64()
	if err != nil {
		return false, fmt.Errorf("undo add %s of item %d: %w", addID, itemID, err)
	}
	return v == 1, nil
}

// AnnounceItem tells every API instance that an item's sale data changed:
// its revision moves (instances that missed the message see it at their
// next refresh) and its id goes out on keyspace.ItemEvents; units back clear
// the sold-out flags at once. endKey, when not empty, is remembered as the
// Idempotency-Key of the request that ended the sale (a day).
func (s *Store) AnnounceItem(ctx context.Context, itemID int64, unitsBack bool, endKey string) error {
	k := s.ItemKeys(itemID)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Incr(ctx, k.Rev)
		if endKey != "" {
			p.SetNX(ctx, k.EndKey, endKey, endKeyTTL)
		}
		p.Publish(ctx, keyspace.ItemEvents(s.prefix), itemID)
		if unitsBack {
			p.Publish(ctx, keyspace.StockEvents(s.prefix), itemID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("announce item %d: %w", itemID, err)
	}
	return nil
}

// EndKey returns the Idempotency-Key of the request that ended the item's
// sale ("" when none was given or it expired).
func (s *Store) EndKey(ctx context.Context, itemID int64) (string, error) {
	v, err := s.rdb.Get(ctx, s.ItemKeys(itemID).EndKey).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read end key of item %d: %w", itemID, err)
	}
	return v, nil
}

// WatchItems calls fn with the id of every item whose sale data changed,
// until ctx ends. Messages lost during a reconnect are caught up by the
// revisions read with Pulses.
func (s *Store) WatchItems(ctx context.Context, fn func(itemID int64)) {
	redisx.Listen(ctx, s.rdb, keyspace.ItemEvents(s.prefix), func(payload string) {
		if id, err := strconv.ParseInt(payload, 10, 64); err == nil && id > 0 {
			fn(id)
		}
	})
}

// Pulse is what an API instance re-reads of an item every second.
type Pulse struct {
	// Left is stock_left; Loaded is false when the stock key is missing.
	Left   int64
	Loaded bool
	// Rev is the item's sale-data revision (0 when never changed).
	Rev int64
	// Marks is how many buyers hold a mark.
	Marks int64
}

// Pulses reads the state of several items in one pipeline (three reads per
// item, each in the item's own slot).
func (s *Store) Pulses(ctx context.Context, itemIDs []int64) (map[int64]Pulse, error) {
	out := make(map[int64]Pulse, len(itemIDs))
	if len(itemIDs) == 0 {
		return out, nil
	}
	type cmds struct {
		left, rev *redis.StringCmd
		marks     *redis.IntCmd
	}
	cs := make([]cmds, len(itemIDs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range itemIDs {
			k := s.ItemKeys(id)
			cs[i] = cmds{left: p.Get(ctx, k.Stock), rev: p.Get(ctx, k.Rev), marks: p.HLen(ctx, k.Buyers)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the state of %d items: %w", len(itemIDs), err)
	}
	for i, id := range itemIDs {
		var st Pulse
		if n, err := cs[i].left.Int64(); err == nil {
			st.Left, st.Loaded = n, true
		}
		st.Rev, _ = cs[i].rev.Int64()
		st.Marks, _ = cs[i].marks.Result()
		out[id] = st
	}
	return out, nil
}

// MarkedBuyers returns the user ids of every buyer holding a mark for the
// item, or ok false when there are more than max (the caller then asks for
// one buyer's mark at a time). It scans the hash in chunks (HSCAN), so a
// large item never blocks Redis: a mark present throughout the scan is in
// the answer; one made during it may not be.
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

// BuyerOrders returns the order id the buyer holds for each of the items
// that has one, in one pipeline (one HGET per item, in its own slot).
func (s *Store) BuyerOrders(ctx context.Context, itemIDs []int64, userID int64) (map[int64]string, error) {
	out := make(map[int64]string)
	if len(itemIDs) == 0 {
		return out, nil
	}
	u := strconv.FormatInt(userID, 10)
	cmds := make([]*redis.StringCmd, len(itemIDs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range itemIDs {
			cmds[i] = p.HGet(ctx, s.ItemKeys(id).Buyers, u)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the marks of buyer %d: %w", userID, err)
	}
	for i, c := range cmds {
		if id, err := c.Result(); err == nil {
			out[itemIDs[i]] = id
		}
	}
	return out, nil
}

// endKeyTTL is how long a retried end with the same Idempotency-Key is
// answered as the one that ended the sale.
const endKeyTTL = 24 * time.Hour
