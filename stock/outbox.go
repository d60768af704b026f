package stock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/order"
)

// MarkQueued stores the QUEUED view of a fresh order under P:order:<id>
// unless the saga already published a later one (SET NX): GET order can then
// answer for an order whose id does not say which item it belongs to.
func (s *Store) MarkQueued(ctx context.Context, v order.View) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode order view: %w", err)
	}
	if err := s.rdb.SetNX(ctx, s.orderKey(v.OrderID), b, StatusTTL).Err(); err != nil {
		return fmt.Errorf("mark order %s queued: %w", v.OrderID, err)
	}
	return nil
}

// LeftMany returns the units left of several items in one round trip; an
// item whose stock is not loaded is absent from the map.
func (s *Store) LeftMany(ctx context.Context, itemIDs []int64) (map[int64]int64, error) {
	if len(itemIDs) == 0 {
		return map[int64]int64{}, nil
	}
	keys := make([]string, len(itemIDs))
	for i, id := range itemIDs {
		keys[i] = s.ItemKeys(id).Stock
	}
	// One MGET per item, pipelined: keys of different items live in
	// different hash slots, which a cluster MGET would refuse.
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read stock of %d items: %w", len(itemIDs), err)
	}
	out := make(map[int64]int64, len(itemIDs))
	for i, c := range cmds {
		n, err := c.Int64()
		if err == nil {
			out[itemIDs[i]] = n
		}
	}
	return out, nil
}

// OutboxEntry is one reservation waiting in an item's outbox stream.
type OutboxEntry struct {
	ID      string // stream entry id
	OrderID string
	Body    []byte // the order.Message JSON written by the reserve script
}

// Message decodes the entry's body.
func (e OutboxEntry) Message() (order.Message, error) { return order.DecodeMessage(e.Body) }

func toEntries(msgs []redis.XMessage) []OutboxEntry {
	out := make([]OutboxEntry, 0, len(msgs))
	for _, m := range msgs {
		e := OutboxEntry{ID: m.ID}
		if v, ok := m.Values["order_id"].(string); ok {
			e.OrderID = v
		}
		if v, ok := m.Values["body"].(string); ok {
			e.Body = []byte(v)
		}
		out = append(out, e)
	}
	return out
}

// EnsureOutboxGroup creates the consumer group on the item's outbox stream,
// reading from the first entry (and creating the stream if needed). An
// existing group is left as it is.
func (s *Store) EnsureOutboxGroup(ctx context.Context, itemID int64, group string) error {
	err := s.rdb.XGroupCreateMkStream(ctx, s.ItemKeys(itemID).Outbox, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create outbox group %s for item %d: %w", group, itemID, err)
	}
	return nil
}

// IsNoGroup reports whether err says the outbox stream has no such consumer
// group: the stream was lost and re-created (Redis restarted without its
// data, a failover, a key deleted by hand). EnsureOutboxGroup makes it again.
func IsNoGroup(err error) bool { return err != nil && strings.Contains(err.Error(), "NOGROUP") }

// ReadOutbox delivers up to count entries to consumer. With pending true it
// returns the entries already delivered to this consumer and not yet acked
// (what a previous life of the same consumer left); otherwise new entries,
// waiting up to block for one (0: do not wait).
func (s *Store) ReadOutbox(ctx context.Context, itemID int64, group, consumer string, count int64, block time.Duration, pending bool) ([]OutboxEntry, error) {
	id := ">"
	if pending {
		id = "0"
	}
	args := &redis.XReadGroupArgs{
		Group: group, Consumer: consumer, Streams: []string{s.ItemKeys(itemID).Outbox, id},
		Count: count, Block: block,
	}
	if block <= 0 {
		args.Block = -1 // go-redis: negative means no BLOCK argument
	}
	res, err := s.rdb.XReadGroup(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read outbox of item %d: %w", itemID, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return toEntries(res[0].Messages), nil
}

// ClaimOutbox takes over up to count entries that another consumer received
// and left unacknowledged for at least minIdle (an instance that died).
func (s *Store) ClaimOutbox(ctx context.Context, itemID int64, group, consumer string, minIdle time.Duration, count int64) ([]OutboxEntry, error) {
	msgs, _, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.ItemKeys(itemID).Outbox, Group: group, Consumer: consumer,
		MinIdle: minIdle, Start: "0-0", Count: count,
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("claim outbox of item %d: %w", itemID, err)
	}
	return toEntries(msgs), nil
}

// TouchOutbox resets the idle time of entries this consumer still works on
// (a send retried while the broker is down), so that other instances do not
// claim them from a live relay.
func (s *Store) TouchOutbox(ctx context.Context, itemID int64, group, consumer string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{
		Stream: s.ItemKeys(itemID).Outbox, Group: group, Consumer: consumer, MinIdle: 0, Messages: ids,
	}).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("touch outbox entries of item %d: %w", itemID, err)
	}
	return nil
}

// AckOutbox acknowledges published entries and deletes them from the stream,
// in one transaction, so the stream length is the unpublished backlog.
func (s *Store) AckOutbox(ctx context.Context, itemID int64, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	key := s.ItemKeys(itemID).Outbox
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, key, group, ids...)
		p.XDel(ctx, key, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("ack outbox entries of item %d: %w", itemID, err)
	}
	return nil
}

// OutboxLen returns the number of entries not yet published (delivered or not).
func (s *Store) OutboxLen(ctx context.Context, itemID int64) (int64, error) {
	n, err := s.rdb.XLen(ctx, s.ItemKeys(itemID).Outbox).Result()
	if err != nil {
		return 0, fmt.Errorf("outbox length of item %d: %w", itemID, err)
	}
	return n, nil
}
