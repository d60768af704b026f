// Package orderstatus is the order's latest view in Redis, for the API: the
// QUEUED view written when a buyer's unit is reserved, every later view the
// saga publishes, and the pub/sub channel that carries them to every API
// instance's event streams.
//
//	P:order:<id>     string   latest order view JSON (TTL)
//	P:events:order   channel  every published view
//
// The database stays the record: a view expires after TTL, and a reader that
// finds none falls back to MySQL.
package orderstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
)

// TTL is how long a published view stays in Redis.
const TTL = 7 * 24 * time.Hour

// Key is the Redis key of an order's view. The stock package writes the
// QUEUED view with this key in the same round trip as the reservation.
func Key(prefix, orderID string) string { return prefix + ":order:" + orderID }

// Board reads and publishes order views.
type Board struct {
	rdb    redis.UniversalClient
	prefix string
}

// New returns a Board whose keys and channel start with prefix.
func New(rdb redis.UniversalClient, prefix string) *Board {
	if rdb == nil {
		panic("orderstatus.New: nil redis client")
	}
	return &Board{rdb: rdb, prefix: prefix}
}

// Channel carries every view the saga publishes.
func (b *Board) Channel() string { return b.prefix + ":events:order" }

// MarkQueued stores the QUEUED view of a fresh order unless a later one was
// already published (SET NX): GET order can then answer for an order whose
// id does not say which item it belongs to.
func (b *Board) MarkQueued(ctx context.Context, v order.View) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode order view: %w", err)
	}
	if err := b.rdb.SetNX(ctx, Key(b.prefix, v.OrderID), body, TTL).Err(); err != nil {
		return fmt.Errorf("mark order %s queued: %w", v.OrderID, err)
	}
	return nil
}

// PublishStatus stores the order's latest view and announces it on Channel.
// Publishing the same view twice is harmless. The two commands share one
// pipeline but not a transaction: on Redis Cluster the key and the channel
// are not in one slot, and a subscriber reads the view from the message.
func (b *Board) PublishStatus(ctx context.Context, v order.View) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode order view: %w", err)
	}
	_, err = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, Key(b.prefix, v.OrderID), body, TTL)
		p.Publish(ctx, b.Channel(), body)
		return nil
	})
	if err != nil {
		return fmt.Errorf("publish status of order %s: %w", v.OrderID, err)
	}
	return nil
}

// Status returns the latest view of an order, if any.
func (b *Board) Status(ctx context.Context, orderID string) (order.View, bool, error) {
	body, err := b.rdb.Get(ctx, Key(b.prefix, orderID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return order.View{}, false, nil
	}
	if err != nil {
		return order.View{}, false, fmt.Errorf("read status of order %s: %w", orderID, err)
	}
	var v order.View
	if err := json.Unmarshal(body, &v); err != nil {
		return order.View{}, false, fmt.Errorf("decode status of order %s: %w", orderID, err)
	}
	return v, true, nil
}

// Watch calls fn with every view published on Channel until ctx ends.
// go-redis subscribes again after a reconnect; what is lost meanwhile a reader
// catches up by polling Status.
func (b *Board) Watch(ctx context.Context, fn func(order.View)) {
	redisx.Listen(ctx, b.rdb, b.Channel(), func(payload string) {
		var v order.View
		if json.Unmarshal([]byte(payload), &v) == nil && v.OrderID != "" {
			fn(v)
		}
	})
}
