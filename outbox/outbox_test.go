package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/testkit"
)

// The relay's life on one item's outbox, on the real Redis: entries written
// by the reserve script are read, read again after a restart (pending),
// claimed by another instance, acknowledged away; a stream lost with its
// group answers NOGROUP until EnsureGroup makes it again.
func TestOutboxLifecycle(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	const item, group = 21, "relay"
	units := stock.New(rdb, prefix)
	if _, err := units.Load(ctx, item, 10); err != nil {
		t.Fatal(err)
	}
	box := outbox.New(rdb, prefix)
	for range 2 { // a second call leaves the group as it is
		if err := box.EnsureGroup(ctx, item, group); err != nil {
			t.Fatal(err)
		}
	}
	reserved := map[string]order.Message{}
	for user := int64(1); user <= 3; user++ {
		m := order.Message{OrderID: order.NewID(), ItemID: item, UserID: user, ReservedAt: time.Now().UTC().Truncate(time.Millisecond)}
		if _, err := units.Reserve(ctx, m); err != nil {
			t.Fatal(err)
		}
		reserved[m.OrderID] = m
	}
	if n, err := box.Len(ctx, item); err != nil || n != 3 {
		t.Fatalf("Len %d, %v; want 3", n, err)
	}
	ids, err := box.OrderIDs(ctx, item)
	if err != nil || len(ids) != 3 {
		t.Fatalf("OrderIDs %v, %v", ids, err)
	}
	for id := range reserved {
		if !ids[id] {
			t.Fatalf("order %s missing from OrderIDs %v", id, ids)
		}
	}

	// Consumer a takes two; their bodies are the reservations.
	got, err := box.Read(ctx, item, group, "a", 2, 0, false)
	if err != nil || len(got) != 2 {
		t.Fatalf("read: %d entries, %v", len(got), err)
	}
	for _, e := range got {
		m, err := order.DecodeMessage(e.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want, ok := reserved[e.OrderID]; !ok || m.OrderID != want.OrderID || m.UserID != want.UserID ||
			m.ItemID != want.ItemID || !m.ReservedAt.Equal(want.ReservedAt) {
			t.Fatalf("entry %s: %+v, want %+v", e.OrderID, m, want)
		}
	}
	// a restarted sees what it held (pending); b gets the one left.
	if again, err := box.Read(ctx, item, group, "a", 10, 0, true); err != nil || len(again) != 2 {
		t.Fatalf("pending of a: %d, %v", len(again), err)
	}
	if rest, err := box.Read(ctx, item, group, "b", 10, 0, false); err != nil || len(rest) != 1 {
		t.Fatalf("b: %d, %v", len(rest), err)
	}
	if none, err := box.Read(ctx, item, group, "b", 10, 0, false); err != nil || len(none) != 0 {
		t.Fatalf("nothing new left, got %d, %v", len(none), err)
	}

	// Nothing is idle for an hour: no claim. Idle for any time: b takes all.
	if c, err := box.Claim(ctx, item, group, "b", time.Hour, 10); err != nil || len(c) != 0 {
		t.Fatalf("claim of fresh entries: %d, %v", len(c), err)
	}
	claimed, err := box.Claim(ctx, item, group, "b", 0, 10)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	if held, err := box.Read(ctx, item, group, "b", 10, 0, true); err != nil || len(held) != 3 {
		t.Fatalf("b holds %d after the claim, %v", len(held), err)
	}
	if err := box.Touch(ctx, item, group, "b", claimed[0].ID); err != nil {
		t.Fatal(err)
	}

	// Acked entries leave the stream: its length is the backlog.
	if err := box.Ack(ctx, item, group, claimed[0].ID, claimed[1].ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := box.Len(ctx, item); n != 1 {
		t.Fatalf("Len %d after two acks, want 1", n)
	}
	if ids, _ := box.OrderIDs(ctx, item); len(ids) != 1 || !ids[claimed[2].OrderID] {
		t.Fatalf("OrderIDs after acks: %v", ids)
	}

	// The stream lost with its group (Redis restarted empty): NOGROUP, then
	// EnsureGroup, then reads work again.
	if err := rdb.Del(ctx, units.ItemKeys(item).Outbox).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := box.Read(ctx, item, group, "a", 10, 0, false); !outbox.IsNoGroup(err) {
		t.Fatalf("read of a lost stream: %v, want NOGROUP", err)
	}
	if err := box.EnsureGroup(ctx, item, group); err != nil {
		t.Fatal(err)
	}
	if e, err := box.Read(ctx, item, group, "a", 10, 0, false); err != nil || len(e) != 0 {
		t.Fatalf("read after EnsureGroup: %d, %v", len(e), err)
	}
}
