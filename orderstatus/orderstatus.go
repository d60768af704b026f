// Package orderstatus is the order's latest view in Redis (until TTL; then
// MySQL), and the channel that carries it to every API instance.
package orderstatus

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
)

const TTL = 7 * 24 * time.Hour

type Board struct {
	rdb    redis.UniversalClient
	prefix string
}

func New(rdb redis.UniversalClient, prefix string) *Board { return &Board{rdb: rdb, prefix: prefix} }

// MarkQueued stores the QUEUED view of a fresh order unless one is there.
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

//go:embed publish.lua
var publishLua string

var publishScript = redis.NewScript(publishLua)

// PublishStatus stores the order's view and announces it, unless the view
// stored is further along (publish.lua).
func (b *Board) PublishStatus(ctx context.Context, v order.View) error {
	_, err := b.PublishAll(ctx, []order.View{v})
	return err
}

// PublishAll is PublishStatus of several views in one round trip, reporting which were stored.
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
		call := publishScript.EvalSha
		if eval {
			call = publishScript.Eval
		}
		_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, v := range views {
				keys, args := []string{keyspace.Order(b.prefix, v.OrderID)}, []any{bodies[i], v.Rank(), int64(TTL / time.Second), keyspace.OrderEvents(b.prefix)}
				cmds[i] = call(ctx, p, keys, args...)
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

func (b *Board) Status(ctx context.Context, orderID string) (order.View, bool, error) {
	return decodeView(orderID, b.rdb.Get(ctx, keyspace.Order(b.prefix, orderID)))
}

// Statuses is Status of several orders in one round trip (zero Views for none).
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

// Watch calls fn with every view published until ctx ends.
func (b *Board) Watch(ctx context.Context, fn func(order.View)) {
	redisx.Listen(ctx, b.rdb, keyspace.OrderEvents(b.prefix), func(payload string) {
		var v order.View
		if json.Unmarshal([]byte(payload), &v) == nil && v.OrderID != "" {
			fn(v)
		}
	})
}
