// Package stock keeps the live sale stock in Redis: the atomic reservation
// (reserve_batch.lua states the rule), its release, reads and repairs.
package stock

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
)

var (
	ErrSoldOut   = errors.New("sold out")
	ErrNotLoaded = errors.New("item stock not loaded in redis")
)

type AlreadyReservedError struct{ OrderID string }

func (e *AlreadyReservedError) Error() string {
	return "buyer already has order " + e.OrderID + " for this item"
}

//go:embed *.lua
var luaFiles embed.FS

func script(name string) *redis.Script {
	b, err := luaFiles.ReadFile(name)
	if err != nil {
		panic(err) // embedded at build time
	}
	return redis.NewScript(string(b))
}

var (
	reserveScript = script("reserve_batch.lua")
	releaseScript = script("release.lua")
	restoreScript = script("restore.lua")
	countScript   = script("count.lua")
	addScript     = script("add.lua")
	unaddScript   = script("unadd.lua")
)

type Store struct {
	rdb    redis.UniversalClient
	prefix string
	batch  batcher
	wait   replicaWait
}

func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix, batch: batcher{pending: map[int64][]*batchReq{}, running: map[int64]bool{}}}
}

func (s *Store) ItemKeys(itemID int64) keyspace.Item { return keyspace.ItemKeys(s.prefix, itemID) }

// WatchUnitsBack calls fn with the item of every unit that comes back, until ctx ends.
func (s *Store) WatchUnitsBack(ctx context.Context, fn func(itemID int64)) {
	watchIDs(ctx, s.rdb, keyspace.StockEvents(s.prefix), fn)
}

func watchIDs(ctx context.Context, rdb redis.UniversalClient, channel string, fn func(itemID int64)) {
	redisx.Listen(ctx, rdb, channel, func(payload string) {
		if id, err := strconv.ParseInt(payload, 10, 64); err == nil && id > 0 {
			fn(id)
		}
	})
}

// Load sets an item's stock unless it is already there, reporting whether it did.
func (s *Store) Load(ctx context.Context, itemID, units int64) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.ItemKeys(itemID).Stock, units, 0).Result()
	if err != nil {
		return false, fmt.Errorf("load stock of item %d: %w", itemID, err)
	}
	return ok, nil
}

type CountMode string

const (
	Warm  CountMode = "warm"  // load a missing stock key; one that exists is live stock, left alone
	Check CountMode = "check" // only count
	Set   CountMode = "set"   // set stock_left to the count
)

// Recount counts what stock_left should be (count.lua): the stock row minus
// the reservations not in deducted, under store.FenceStock. It returns the old
// value (-1: not loaded) and the wanted one (at least 0).
func (s *Store) Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode CountMode) (old, want int64, err error) {
	k := s.ItemKeys(itemID)
	args := []any{string(mode), stockRow, keyspace.StockEvents(s.prefix), itemID}
	for _, id := range deducted {
		args = append(args, id)
	}
	v, err := countScript.Run(ctx, s.rdb, []string{k.Stock, k.Orders, k.Short, k.Adds}, args...).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("unexpected reply %v", v)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%s stock_left of item %d: %w", mode, itemID, err)
	}
	return v[0], v[1], nil
}

// Left returns the units not reserved (ErrNotLoaded: no stock key).
func (s *Store) Left(ctx context.Context, itemID int64) (int64, error) {
	n, err := s.rdb.Get(ctx, s.ItemKeys(itemID).Stock).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("item %d: %w", itemID, ErrNotLoaded)
	}
	if err != nil {
		return 0, fmt.Errorf("read stock of item %d: %w", itemID, err)
	}
	return n, nil
}

// LeftMany is Left of several items in one round trip; an item not loaded is absent.
func (s *Store) LeftMany(ctx context.Context, itemIDs []int64) (map[int64]int64, error) {
	cmds, err := perItem(ctx, s, itemIDs, func(p redis.Pipeliner, k keyspace.Item) *redis.StringCmd {
		return p.Get(ctx, k.Stock)
	})
	if err != nil {
		return nil, fmt.Errorf("read stock of %d items: %w", len(itemIDs), err)
	}
	out := make(map[int64]int64, len(itemIDs))
	for i, c := range cmds {
		if n, err := c.Int64(); err == nil {
			out[itemIDs[i]] = n
		}
	}
	return out, nil
}

// perItem queues read's commands for every item in one pipeline (items live
// in different cluster slots); a missing key is not an error.
func perItem[T any](ctx context.Context, s *Store, itemIDs []int64, read func(p redis.Pipeliner, k keyspace.Item) T) ([]T, error) {
	cmds := make([]T, len(itemIDs))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range itemIDs {
			cmds[i] = read(p, s.ItemKeys(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	return cmds, nil
}

// Release gives an order's unit back once and marks it released so no repair
// puts it back (release.lua); true when this call removed the reservation.
func (s *Store) Release(ctx context.Context, itemID int64, orderID string) (bool, error) {
	return s.giveBack(ctx, itemID, orderID, "release")
}

// Retire is Release without the unit: the stock row never had it.
func (s *Store) Retire(ctx context.Context, itemID int64, orderID string) (bool, error) {
	return s.giveBack(ctx, itemID, orderID, "retire")
}

func (s *Store) giveBack(ctx context.Context, itemID int64, orderID, mode string) (bool, error) {
	k := s.ItemKeys(itemID)
	n, err := releaseScript.Run(ctx, s.rdb, []string{k.Stock, k.Orders, k.Released, k.Short},
		orderID, itemID, keyspace.StockEvents(s.prefix), mode).Int64()
	if err != nil {
		return false, fmt.Errorf("%s order %s of item %d: %w", mode, orderID, itemID, err)
	}
	return n == 1, nil
}

// Reservation returns a live reservation (false once released or never made).
func (s *Store) Reservation(ctx context.Context, itemID int64, orderID string) (order.Message, bool, error) {
	return decodeReservation(orderID, s.rdb.HGet(ctx, s.ItemKeys(itemID).Orders, orderID))
}

// Reservations is Reservation of orderIDs[i] of itemIDs[i] in one round trip.
func (s *Store) Reservations(ctx context.Context, itemIDs []int64, orderIDs []string) ([]order.Message, error) {
	i := 0
	cmds, err := perItem(ctx, s, itemIDs, func(p redis.Pipeliner, k keyspace.Item) *redis.StringCmd {
		i++
		return p.HGet(ctx, k.Orders, orderIDs[i-1])
	})
	if err != nil {
		return nil, fmt.Errorf("read %d reservations: %w", len(orderIDs), err)
	}
	out := make([]order.Message, len(orderIDs))
	for i, c := range cmds {
		if out[i], _, err = decodeReservation(orderIDs[i], c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func decodeReservation(orderID string, c *redis.StringCmd) (order.Message, bool, error) {
	b, err := c.Bytes()
	if errors.Is(err, redis.Nil) {
		return order.Message{}, false, nil
	}
	if err != nil {
		return order.Message{}, false, fmt.Errorf("read reservation %s: %w", orderID, err)
	}
	m, err := order.DecodeMessage(b)
	return m, err == nil, err
}

func (s *Store) BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error) {
	id, err := s.rdb.HGet(ctx, s.ItemKeys(itemID).Buyers, strconv.FormatInt(userID, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		s.reloadOnMoved(ctx, err)
		return "", false, fmt.Errorf("read buyer mark: %w", err)
	}
	return id, true, nil
}

// Restore puts back an order's reservation and buyer mark unless it is there
// or was released (restore.lua); the caller recounts stock_left afterwards.
func (s *Store) Restore(ctx context.Context, m order.Message) (restored bool, err error) {
	n, err := s.RestoreAll(ctx, m.ItemID, []order.Message{m})
	return n == 1, err
}

// restoreChunk bounds one restore script: Redis runs nothing else meanwhile.
const restoreChunk = 500

// RestoreAll is Restore of one item's messages, returning how many it put back.
func (s *Store) RestoreAll(ctx context.Context, itemID int64, ms []order.Message) (restored int, err error) {
	k := s.ItemKeys(itemID)
	for len(ms) > 0 {
		chunk := ms[:min(len(ms), restoreChunk)]
		ms = ms[len(chunk):]
		args := make([]any, 0, 3*len(chunk))
		for _, m := range chunk {
			if m.ItemID != itemID {
				return restored, fmt.Errorf("restore reservation %s: item %d, not %d", m.OrderID, m.ItemID, itemID)
			}
			args = append(args, m.OrderID, m.UserID, m.Encode())
		}
		v, err := restoreScript.Run(ctx, s.rdb, []string{k.Orders, k.Buyers, k.Released}, args...).Int64Slice()
		if err != nil {
			return restored, fmt.Errorf("restore %d reservations of item %d: %w", len(chunk), itemID, err)
		}
		for _, n := range v {
			if n == 1 {
				restored++
			}
		}
	}
	return restored, nil
}

// ItemState is what Redis holds for one item, read in one MULTI/EXEC.
type ItemState struct {
	Left         int64 // stock_left; -1 when the stock key is missing
	Reservations map[string]order.Message
	Marks        map[int64]string // buyer -> order id
	Released     map[string]bool  // order ids released or retired
}

func (s *Store) ReadItemState(ctx context.Context, itemID int64) (ItemState, error) {
	k := s.ItemKeys(itemID)
	var left *redis.StringCmd
	var resv, marks *redis.MapStringStringCmd
	var rel *redis.StringSliceCmd
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		left = p.Get(ctx, k.Stock)
		resv = p.HGetAll(ctx, k.Orders)
		marks = p.HGetAll(ctx, k.Buyers)
		rel = p.SMembers(ctx, k.Released)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return ItemState{}, fmt.Errorf("read redis state of item %d: %w", itemID, err)
	}
	st := ItemState{Left: -1, Reservations: map[string]order.Message{}, Marks: map[int64]string{}, Released: map[string]bool{}}
	if n, err := left.Int64(); err == nil {
		st.Left = n
	} else if !errors.Is(err, redis.Nil) {
		return ItemState{}, fmt.Errorf("stock of item %d: %w", itemID, err)
	}
	for id, body := range resv.Val() {
		m, err := order.DecodeMessage([]byte(body))
		if err != nil {
			return ItemState{}, fmt.Errorf("reservation %s of item %d: %w", id, itemID, err)
		}
		st.Reservations[id] = m
	}
	for u, id := range marks.Val() {
		uid, err := strconv.ParseInt(u, 10, 64)
		if err != nil {
			return ItemState{}, fmt.Errorf("buyer mark %q of item %d: %w", u, itemID, err)
		}
		st.Marks[uid] = id
	}
	for _, id := range rel.Val() {
		st.Released[id] = true
	}
	return st, nil
}

// AddUnits puts n more units on sale once per addID, reporting whether the
// stock is loaded. Run inside store.Store.AddStock; if that did not commit,
// call UndoAdd under the stock row lock.
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

// AnnounceItem announces that an item's sale data changed (unitsBack: units
// came back) and returns its new revision.
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

// WatchItems calls fn with the id of every item announced, until ctx ends.
func (s *Store) WatchItems(ctx context.Context, fn func(itemID int64)) {
	watchIDs(ctx, s.rdb, keyspace.ItemEvents(s.prefix), fn)
}

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

// MarkedBuyers returns the buyers holding a mark (ok false: more than max),
// by HSCAN: a mark made meanwhile may be missing.
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
