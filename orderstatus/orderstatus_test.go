package orderstatus_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/testkit"
)

// A published view is stored, readable, and reaches a watcher; MarkQueued
// never overwrites a later view.
func TestPublishStatusWatchAndMarkQueued(t *testing.T) {
	testkit.Integration(t)
	rdb, prefix := testkit.Redis(t)
	b := orderstatus.New(rdb, prefix)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan order.View, 16)
	done := make(chan struct{})
	go func() { defer close(done); b.Watch(ctx, func(v order.View) { got <- v }) }()
	defer func() { cancel(); <-done }()

	v := order.View{OrderID: order.NewID(), ItemID: 3, UserID: 4, Status: order.StatusPendingPayment}
	// The subscription starts asynchronously: publish until the watcher
	// hears it (a positive signal, no sleep).
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		if err := b.PublishStatus(ctx, v); err != nil {
			t.Fatal(err)
		}
		select {
		case w := <-got:
			if w.OrderID != v.OrderID || w.Status != v.Status {
				t.Fatalf("watched %+v, want %+v", w, v)
			}
			break wait
		case <-tick.C:
		case <-deadline:
			t.Fatal("the watcher never heard the published view")
		}
	}
	s, ok, err := b.Status(ctx, v.OrderID)
	if err != nil || !ok || s.Status != order.StatusPendingPayment {
		t.Fatalf("status: %+v %v %v", s, ok, err)
	}
	// QUEUED after PENDING_PAYMENT: the later view stays.
	if err := b.MarkQueued(ctx, order.View{OrderID: v.OrderID, Status: order.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := b.Status(ctx, v.OrderID); s.Status != order.StatusPendingPayment {
		t.Fatalf("MarkQueued overwrote a later view: %s", s.Status)
	}
	if _, ok, err := b.Status(ctx, order.NewID()); ok || err != nil {
		t.Fatalf("unknown order: ok=%v err=%v", ok, err)
	}
	if ttl := rdb.TTL(ctx, keyspace.Order(prefix, v.OrderID)).Val(); ttl <= 0 || ttl > orderstatus.TTL {
		t.Fatalf("view TTL %v, want (0, %v]", ttl, orderstatus.TTL)
	}
}

// Views only move forward: a late PENDING_PAYMENT (the saga's Notify) never
// replaces the door's PAID; a PAID still settling gives way to the settled
// PAID or to REFUNDED; a settled final status is never replaced.
func TestPublishNeverGoesBackwards(t *testing.T) {
	testkit.Integration(t)
	rdb, prefix := testkit.Redis(t)
	b := orderstatus.New(rdb, prefix)
	ctx := context.Background()
	id := order.NewID()
	view := func(s order.Status, settling bool) order.View {
		return order.View{OrderID: id, ItemID: 1, UserID: 2, Status: s, Settling: settling}
	}
	if stored, err := b.PublishAll(ctx, nil); err != nil || len(stored) != 0 {
		t.Fatalf("publishing nothing: %v %v", stored, err)
	}
	for i, step := range []struct {
		v      order.View
		stored bool
		want   order.Status
	}{
		{view(order.StatusQueued, false), true, order.StatusQueued},
		{view(order.StatusPaid, true), true, order.StatusPaid},             // the door, while QUEUED
		{view(order.StatusPendingPayment, false), false, order.StatusPaid}, // a late saga view
		{view(order.StatusRefunded, false), true, order.StatusRefunded},    // phantom unit
		{view(order.StatusPaid, false), false, order.StatusRefunded},       // settled: stays
		{view(order.StatusPendingPayment, false), false, order.StatusRefunded},
	} {
		stored, err := b.PublishAll(ctx, []order.View{step.v})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := b.Status(ctx, id)
		if stored[0] != step.stored || got.Status != step.want {
			t.Fatalf("step %d (%s settling=%v): stored %v, view %s; want %v, %s", i, step.v.Status, step.v.Settling, stored[0], got.Status, step.stored, step.want)
		}
	}
}

// A closed order's view is replaced by its confirmed refund (rank 4), and
// that by nothing.
func TestPublishRefundReplacesClose(t *testing.T) {
	testkit.Integration(t)
	rdb, prefix := testkit.Redis(t)
	b := orderstatus.New(rdb, prefix)
	ctx := context.Background()
	id := order.NewID()
	closed := order.View{OrderID: id, ItemID: 1, UserID: 2, Status: order.StatusCancelled}
	refunded := order.View{OrderID: id, ItemID: 1, UserID: 2, Status: order.StatusRefunded, RefundID: "re_1"}
	for i, step := range []struct {
		v      order.View
		stored bool
	}{{closed, true}, {refunded, true}, {closed, false}, {refunded, false}} {
		stored, err := b.PublishAll(ctx, []order.View{step.v})
		if err != nil {
			t.Fatal(err)
		}
		got, _, _ := b.Status(ctx, id)
		if stored[0] != step.stored || i > 0 && got.RefundID != "re_1" {
			t.Fatalf("step %d: stored %v, view %+v", i, stored[0], got)
		}
	}
}
