// Package orderstatus is the order's latest view in Redis, for the API: the
// QUEUED view written when a buyer's unit is reserved, every later view the
// saga publishes, and the pub/sub channel that carries them to every API
// instance's event streams (keys: package keyspace). The database stays the record: a view expires after TTL, and a reader that
// finds none falls back to MySQL.
package orderstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
)

// TTL is how long a published view stays in Redis.
const TTL = 7 * 24 * time.Hour

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
func (b *Board) Channel() string { return keyspace.OrderEvents(b.prefix) }

// MarkQueued stores the QUEUED view of a fresh order unless a later one was
// already published (SET NX): GET order can then answer for an order whose
// id does not say which item it belongs to.
func (b *Board) MarkQueued(ctx context.Context, v order.View) error {
	body, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode order view: %w", err)
	}
	if err := b.rdb.SetNX(ctx, keyspace.Order(b.prefix, v.OrderID), body, TTL).Err(); err != nil {
		return fmt.Errorf("mark order %s queued: %w", v.OrderID, err)
	}
	return nil
}

// publishScript stores a view and announces it unless the stored view is
// further along (order.View.Rank): a saga's late PENDING_PAYMENT never
// replaces the PAID the door published, and a settled final status is never
// replaced. The key's slot holds the view; PUBLISH needs no key (on Redis
// Cluster it reaches every node).
// KEYS[1] view key   ARGV[1] view JSON   ARGV[2] its rank   ARGV[3] TTL (s)   ARGV[4] channel
// Returns 1 when stored and announced, 0 when the stored view is further along.
var publishScript = redis.NewScript(`
local old = redis.call('GET', KEYS[1])
if old then
  local ok, v = pcall(cjson.decode, old)
  if ok and type(v) == 'table' then
    local r = 0
    local st = v['status']
    if st == 'PENDING_PAYMENT' then r = 1
    elseif st == 'PAID' or st == 'CANCELLED' or st == 'FAILED' or st == 'REFUNDED' then
      if v['settling'] == true then r = 2 else r = 3 end
    end
    local new = tonumber(ARGV[2])
    if r > new or (r == 3 and new == 3) then return 0 end
  end
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('PUBLISH', ARGV[4], ARGV[1])
return 1
`)

// PublishStatus stores the order's latest view and announces it on Channel,
// unless the view stored is further along (see order.View.Rank): views only
// move forward, whatever order the saga and the door publish them in.
// Publishing the same view twice is harmless.
func (b *Board) PublishStatus(ctx context.Context, v order.View) error {
	_, err := b.PublishAll(ctx, []order.View{v})
	return err
}

// PublishAll is PublishStatus of several views in one round trip,
// reporting which were stored (false: the view stored was further along).
func (b *Board) PublishAll(ctx context.Context, views []order.View) ([]bool, error) {
	if len(views) == 0 {
		return nil, nil
	}
	bodies := make([][]byte, len(views))
	for i, v := range views {
		var err error
		if bodies[i], err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("encode order view: %w", err)
		}
	}
	cmds := make([]*redis.Cmd, len(views))
	run := func(eval bool) {
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, v := range views {
				keys, args := []string{keyspace.Order(b.prefix, v.OrderID)}, []any{bodies[i], v.Rank(), int64(TTL / time.Second), b.Channel()}
				if eval {
					cmds[i] = publishScript.Eval(ctx, p, keys, args...)
				} else {
					cmds[i] = publishScript.EvalSha(ctx, p, keys, args...)
				}
			}
			return nil
		})
	}
	run(false)
	if redis.HasErrorPrefix(cmds[0].Err(), "NOSCRIPT") {
		run(true) // a restarted Redis: the views already stored are stored again, harmlessly
	}
	stored := make([]bool, len(views))
	for i, c := range cmds {
		n, err := c.Int64()
		if err != nil {
			return nil, fmt.Errorf("publish status of order %s: %w", views[i].OrderID, err)
		}
		stored[i] = n == 1
	}
	return stored, nil
}

// Status returns the latest view of an order, if any.
func (b *Board) Status(ctx context.Context, orderID string) (order.View, bool, error) {
	return decodeView(orderID, b.rdb.Get(ctx, keyspace.Order(b.prefix, orderID)))
}

// Statuses is Status of several orders in one round trip (the zero View
// where there is none).
func (b *Board) Statuses(ctx context.Context, orderIDs []string) ([]order.View, error) {
	cmds := make([]*redis.StringCmd, len(orderIDs))
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range orderIDs {
			cmds[i] = p.Get(ctx, keyspace.Order(b.prefix, id))
		}
		return nil
	})
	views := make([]order.View, len(orderIDs))
	for i, c := range cmds {
		var err error
		if views[i], _, err = decodeView(orderIDs[i], c); err != nil {
			return nil, err
		}
	}
	return views, nil
}

func decodeView(orderID string, c *redis.StringCmd) (order.View, bool, error) {
	body, err := c.Bytes()
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
