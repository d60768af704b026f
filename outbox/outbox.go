// Package outbox reads the items' outbox streams (docs/handoff.md) for the relay.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
)

type Stream struct {
	rdb    redis.UniversalClient
	prefix string
}

func New(rdb redis.UniversalClient, prefix string) *Stream { return &Stream{rdb: rdb, prefix: prefix} }

func (s *Stream) key(itemID int64) string { return keyspace.ItemKeys(s.prefix, itemID).Outbox }

// OrderIDs returns the order ids of every entry in the stream, delivered or not.
func (s *Stream) OrderIDs(ctx context.Context, itemID int64) (map[string]bool, error) {
	msgs, err := s.rdb.XRange(ctx, s.key(itemID), "-", "+").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("outbox of item %d: %w", itemID, err)
	}
	out := make(map[string]bool, len(msgs))
	for _, e := range toEntries(msgs) {
		out[e.OrderID] = true
	}
	return out, nil
}

type Entry struct {
	ID      string // stream entry id
	OrderID string
	Body    []byte // the order.Message JSON written by the reserve script
}

func toEntries(msgs []redis.XMessage) []Entry {
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		orderID, _ := m.Values["order_id"].(string)
		body, _ := m.Values["body"].(string)
		out = append(out, Entry{ID: m.ID, OrderID: orderID, Body: []byte(body)})
	}
	return out
}

// EnsureGroup creates the consumer group (and the stream) unless it exists.
func (s *Stream) EnsureGroup(ctx context.Context, itemID int64, group string) error {
	err := s.rdb.XGroupCreateMkStream(ctx, s.key(itemID), group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create outbox group %s for item %d: %w", group, itemID, err)
	}
	return nil
}

// IsNoGroup: the stream lost its consumer group (EnsureGroup makes it again).
func IsNoGroup(err error) bool { return err != nil && strings.Contains(err.Error(), "NOGROUP") }

// Read delivers up to count entries to consumer: with pending, those
// delivered to it and not yet acked; else new ones, waiting up to block.
func (s *Stream) Read(ctx context.Context, itemID int64, group, consumer string, count int64, block time.Duration, pending bool) ([]Entry, error) {
	id := ">"
	if pending {
		id = "0"
	}
	args := &redis.XReadGroupArgs{Group: group, Consumer: consumer, Streams: []string{s.key(itemID), id}, Count: count, Block: block}
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

// Claim takes over up to count entries another consumer left unacked for minIdle.
func (s *Stream) Claim(ctx context.Context, itemID int64, group, consumer string, minIdle time.Duration, count int64) ([]Entry, error) {
	msgs, _, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{Stream: s.key(itemID), Group: group, Consumer: consumer,
		MinIdle: minIdle, Start: "0-0", Count: count}).Result()
	if err != nil {
		return nil, fmt.Errorf("claim outbox of item %d: %w", itemID, err)
	}
	return toEntries(msgs), nil
}

// Touch resets the idle time of entries still worked on, so none claims them.
func (s *Stream) Touch(ctx context.Context, itemID int64, group, consumer string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	err := s.rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: s.key(itemID), Group: group, Consumer: consumer, Messages: ids}).Err()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("touch outbox entries of item %d: %w", itemID, err)
	}
	return nil
}

// Ack acknowledges published entries and deletes them, in one transaction.
func (s *Stream) Ack(ctx context.Context, itemID int64, group string, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	key := s.key(itemID)
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

func (s *Stream) Len(ctx context.Context, itemID int64) (int64, error) {
	n, err := s.rdb.XLen(ctx, s.key(itemID)).Result()
	if err != nil {
		return 0, fmt.Errorf("outbox length of item %d: %w", itemID, err)
	}
	return n, nil
}
