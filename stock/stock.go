// Package stock keeps the live flash-sale stock in Redis: the atomic
// reservation (one unit per buyer, never below zero, the order appended to the
// item's outbox stream in the same script), its release by compensation, and
// the order status that the saga publishes for the API.
//
// Every key of one item shares the hash tag {itemID}, so the scripts run
// unchanged on Redis Cluster:
//
//	P:{42}:stock   string  units not reserved (stock_left)
//	P:{42}:buyers  hash    user id -> order id; the buyer's mark, never removed
//	P:{42}:orders  hash    order id -> reservation JSON; removed on release
//	P:{42}:outbox  stream  reservations waiting to be published to RocketMQ
//	P:order:<id>   string  latest order view JSON published by the saga
//
// P is the configured key prefix ("seckill").
package stock

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/order"
)

// Reservation outcomes other than success.
var (
	ErrSoldOut   = errors.New("sold out")
	ErrNotLoaded = errors.New("item stock not loaded in redis")
)

// AlreadyReservedError says the buyer already holds an order for the item.
type AlreadyReservedError struct{ OrderID string }

func (e *AlreadyReservedError) Error() string {
	return "buyer already has order " + e.OrderID + " for this item"
}

//go:embed reserve.lua
var reserveLua string

//go:embed release.lua
var releaseLua string

var (
	reserveScript = redis.NewScript(reserveLua)
	releaseScript = redis.NewScript(releaseLua)
)

// Store is the Redis side of the stock.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	// ap, when set, carries ReserveQueued's commands: concurrent callers'
	// commands are coalesced into shared pipelines (see UseAutoPipeline).
	ap redis.Cmdable
}

// UseAutoPipeline makes ReserveQueued send its commands through go-redis's
// autopipeliner on c (the client the Store was built on): the commands of
// concurrent purchases share one write and one read instead of a round trip
// each, which is what a purchase stampede costs on a small machine. Order
// per caller is kept (one ordered stream).
func (s *Store) UseAutoPipeline(c *redis.Client) error {
	ap, err := c.AutoPipeline()
	if err != nil {
		return fmt.Errorf("redis autopipeline: %w", err)
	}
	s.ap = ap
	return nil
}

// New returns a Store whose keys start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Store {
	return &Store{rdb: rdb, prefix: prefix}
}

// Keys of one item.
type Keys struct{ Stock, Buyers, Orders, Outbox string }

// ItemKeys returns the keys of an item.
func (s *Store) ItemKeys(itemID int64) Keys {
	tag := s.prefix + ":{" + strconv.FormatInt(itemID, 10) + "}:"
	return Keys{Stock: tag + "stock", Buyers: tag + "buyers", Orders: tag + "orders", Outbox: tag + "outbox"}
}

// OrderEventsChannel carries every order view the saga publishes.
func (s *Store) OrderEventsChannel() string { return s.prefix + ":events:order" }

// StockEventsChannel carries the id of an item whenever a unit comes back.
func (s *Store) StockEventsChannel() string { return s.prefix + ":events:stock" }

func (s *Store) orderKey(orderID string) string { return s.prefix + ":order:" + orderID }

// Client exposes the Redis client (the outbox relay and tests use it).
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Load sets an item's stock to units unless it is already there: warm-up never
// overwrites live stock. It reports whether it set the value.
func (s *Store) Load(ctx context.Context, itemID, units int64) (bool, error) {
	ok, err := s.rdb.SetNX(ctx, s.ItemKeys(itemID).Stock, units, 0).Result()
	if err != nil {
		return false, fmt.Errorf("load stock of item %d: %w", itemID, err)
	}
	return ok, nil
}

// Left returns the units not reserved; ErrNotLoaded when the item has no stock key.
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

// Reserve takes one unit for the buyer in one atomic script: the buyer must
// hold no order for the item, stock must be above zero; then it decrements,
// records the reservation, marks the buyer and appends the reservation to
// the item's outbox stream. It returns the units left.
func (s *Store) Reserve(ctx context.Context, r order.Message) (int64, error) {
	k := s.ItemKeys(r.ItemID)
	cmd := reserveScript.Run(ctx, s.rdb, []string{k.Stock, k.Buyers, k.Orders, k.Outbox},
		r.UserID, r.OrderID, r.Encode())
	if err := cmd.Err(); err != nil {
		return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, err)
	}
	return reserveReply(r, cmd)
}

// reserveReply decodes the reserve script's reply.
func reserveReply(r order.Message, cmd *redis.Cmd) (int64, error) {
	res, err := cmd.Slice()
	if err != nil {
		return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, err)
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("reserve: unexpected reply %v", res)
	}
	code, _ := res[0].(int64)
	switch code {
	case 0:
		left, _ := res[1].(int64)
		return left, nil
	case 1:
		return 0, ErrSoldOut
	case 2:
		id, _ := res[1].(string)
		return 0, &AlreadyReservedError{OrderID: id}
	case 3:
		return 0, fmt.Errorf("item %d: %w", r.ItemID, ErrNotLoaded)
	}
	return 0, fmt.Errorf("reserve: unexpected code %d", code)
}

// ReserveQueued is Reserve and MarkQueued in one round trip: the reserve
// script and the SET NX of the order's QUEUED view go to Redis in one
// pipeline (the order key is in another hash slot than the item's keys, so it
// cannot be written by the script itself). The view is stored only if the
// script took the unit: when it did not (sold out, already reserved, not
// loaded) the view written by the pipeline is deleted again; the order id is
// fresh, so nothing else has written that key. On any other error the caller
// learns nothing about the reservation and must find out (BuyerOrder), as
// with Reserve; the view, if stored, is then correct only if it did reserve.
func (s *Store) ReserveQueued(ctx context.Context, r order.Message, v order.View) (int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode order view: %w", err)
	}
	k := s.ItemKeys(r.ItemID)
	keys := []string{k.Stock, k.Buyers, k.Orders, k.Outbox}
	args := []any{r.UserID, r.OrderID, r.Encode()}
	if s.ap != nil {
		// Two commands, each in a shared pipeline; the view only after the
		// script took the unit.
		cmd := reserveScript.Run(ctx, s.ap, keys, args...)
		if err := cmd.Err(); err != nil {
			return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, err)
		}
		left, err := reserveReply(r, cmd)
		if err != nil {
			return 0, err
		}
		// A failed SET NX only leaves GET order blind until the saga
		// publishes the next status.
		_ = s.ap.SetNX(ctx, s.orderKey(r.OrderID), b, StatusTTL).Err()
		return left, nil
	}
	var res *redis.Cmd
	// The pipeline's own error is that of its first failed command; what
	// counts is the script's. A failed SET NX only leaves GET order blind
	// until the saga publishes the next status, as with MarkQueued.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		res = reserveScript.EvalSha(ctx, p, keys, args...)
		p.SetNX(ctx, s.orderKey(r.OrderID), b, StatusTTL)
		return nil
	})
	if redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		// Redis lost its script cache (restart, SCRIPT FLUSH): EVAL loads it.
		res = reserveScript.Eval(ctx, s.rdb, keys, args...)
	}
	if err := res.Err(); err != nil {
		return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, err)
	}
	left, err := reserveReply(r, res)
	if err != nil {
		// Not reserved: drop the view (best effort; it names an order that
		// no one was told about).
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
		_ = s.rdb.Del(dctx, s.orderKey(r.OrderID)).Err()
		cancel()
		return 0, err
	}
	return left, nil
}

// Release gives an order's unit back: the reservation is removed and stock
// goes up by one, only if the reservation was still there, so a repeated
// release never adds a unit twice. The buyer keeps the mark. Every API
// instance hears of the unit on StockEventsChannel. It reports whether this
// call released the unit.
func (s *Store) Release(ctx context.Context, itemID int64, orderID string) (bool, error) {
	k := s.ItemKeys(itemID)
	n, err := releaseScript.Run(ctx, s.rdb, []string{k.Stock, k.Orders},
		orderID, itemID, s.StockEventsChannel()).Int64()
	if err != nil {
		return false, fmt.Errorf("release order %s of item %d: %w", orderID, itemID, err)
	}
	return n == 1, nil
}

// Retire ends an order's reservation without giving its unit back: the stock
// row (the ground truth) never had that unit, so putting it on sale would only
// fail the next buyer the same way. One HDEL; a repeated call finds nothing.
// The buyer keeps the mark. It reports whether this call removed it.
func (s *Store) Retire(ctx context.Context, itemID int64, orderID string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.ItemKeys(itemID).Orders, orderID).Result()
	if err != nil {
		return false, fmt.Errorf("retire order %s of item %d: %w", orderID, itemID, err)
	}
	return n == 1, nil
}

// Reservation returns a live reservation (false once released or never made).
func (s *Store) Reservation(ctx context.Context, itemID int64, orderID string) (order.Message, bool, error) {
	b, err := s.rdb.HGet(ctx, s.ItemKeys(itemID).Orders, orderID).Bytes()
	if errors.Is(err, redis.Nil) {
		return order.Message{}, false, nil
	}
	if err != nil {
		return order.Message{}, false, fmt.Errorf("read reservation %s: %w", orderID, err)
	}
	m, err := order.DecodeMessage(b)
	if err != nil {
		return order.Message{}, false, err
	}
	return m, true, nil
}

// BuyerOrder returns the order id the buyer holds for the item, if any.
func (s *Store) BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error) {
	id, err := s.rdb.HGet(ctx, s.ItemKeys(itemID).Buyers, strconv.FormatInt(userID, 10)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read buyer mark: %w", err)
	}
	return id, true, nil
}

// StatusTTL is how long a published order status stays in Redis; the database
// stays the record after that.
const StatusTTL = 7 * 24 * time.Hour

// PublishStatus stores the order's latest view and announces it on
// OrderEventsChannel. Publishing the same view twice is harmless.
func (s *Store) PublishStatus(ctx context.Context, v order.View) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode order view: %w", err)
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, s.orderKey(v.OrderID), b, StatusTTL)
		p.Publish(ctx, s.OrderEventsChannel(), b)
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish status of order %s: %w", v.OrderID, err)
	}
	return nil
}

// Status returns the latest published view of an order, if any.
func (s *Store) Status(ctx context.Context, orderID string) (order.View, bool, error) {
	b, err := s.rdb.Get(ctx, s.orderKey(orderID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return order.View{}, false, nil
	}
	if err != nil {
		return order.View{}, false, fmt.Errorf("read status of order %s: %w", orderID, err)
	}
	var v order.View
	if err := json.Unmarshal(b, &v); err != nil {
		return order.View{}, false, fmt.Errorf("decode status of order %s: %w", orderID, err)
	}
	return v, true, nil
}
