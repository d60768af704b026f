package stock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/testkit"
)

func msg(item, user int64) order.Message {
	return order.Message{OrderID: order.NewID(), ItemID: item, UserID: user, ReservedAt: time.Now().UTC()}
}

func TestReserveReleaseRoundTrip(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()

	if _, err := s.Reserve(ctx, msg(1, 1)); !errors.Is(err, stock.ErrNotLoaded) {
		t.Fatalf("reserve before load: want ErrNotLoaded, got %v", err)
	}
	if ok, err := s.Load(ctx, 1, 2); !ok || err != nil {
		t.Fatalf("load: %v %v", ok, err)
	}
	if ok, _ := s.Load(ctx, 1, 100); ok {
		t.Fatal("warm-up overwrote live stock")
	}
	a := msg(1, 10)
	if left, err := s.Reserve(ctx, a); err != nil || left != 1 {
		t.Fatalf("reserve: left=%d err=%v", left, err)
	}
	var dup *stock.AlreadyReservedError
	if _, err := s.Reserve(ctx, msg(1, 10)); !errors.As(err, &dup) || dup.OrderID != a.OrderID {
		t.Fatalf("second reserve by the same buyer: %v", err)
	}
	if _, err := s.Reserve(ctx, msg(1, 11)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, msg(1, 12)); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("want sold out, got %v", err)
	}
	got, ok, err := s.Reservation(ctx, 1, a.OrderID)
	if err != nil || !ok || got.UserID != 10 {
		t.Fatalf("reservation: %+v %v %v", got, ok, err)
	}
	if n := rdb.XLen(ctx, s.ItemKeys(1).Outbox).Val(); n != 2 {
		t.Fatalf("outbox has %d entries, want 2", n)
	}

	sub := rdb.Subscribe(ctx, keyspace.StockEvents(prefix))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ { // a repeated release never adds a unit twice
		released, err := s.Release(ctx, 1, a.OrderID)
		if err != nil || released != (i == 0) {
			t.Fatalf("release #%d: released=%v err=%v", i, released, err)
		}
	}
	if left, _ := s.Left(ctx, 1); left != 1 {
		t.Fatalf("after release left=%d, want 1", left)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "1" {
			t.Fatalf("stock event payload %q", m.Payload)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no stock event after release")
	}
	if _, err := s.Reserve(ctx, msg(1, 10)); !errors.As(err, &dup) {
		t.Fatal("buyer lost their mark after release")
	}
	if _, err := s.Reserve(ctx, msg(1, 13)); err != nil {
		t.Fatalf("another buyer cannot buy the released unit: %v", err)
	}
}

// TestReserveStampede races many buyers (some sending several times) for a
// few units on the real Redis and counts.
func TestReserveStampede(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const units, buyers, repeats = 100, 2000, 3
	if _, err := s.Load(ctx, 7, units); err != nil {
		t.Fatal(err)
	}
	var won, soldOut, dup atomic.Int64
	perBuyer := make([]atomic.Int64, buyers+1)
	var wg sync.WaitGroup
	for u := 1; u <= buyers; u++ {
		n := 1
		if u%10 == 0 {
			n = repeats
		}
		for j := 0; j < n; j++ {
			wg.Add(1)
			go func(u int64) {
				defer wg.Done()
				_, err := s.Reserve(ctx, msg(7, u))
				var already *stock.AlreadyReservedError
				switch {
				case err == nil:
					won.Add(1)
					perBuyer[u].Add(1)
				case errors.Is(err, stock.ErrSoldOut):
					soldOut.Add(1)
				case errors.As(err, &already):
					dup.Add(1)
				default:
					t.Errorf("reserve: %v", err)
				}
			}(int64(u))
		}
	}
	wg.Wait()
	if won.Load() != units {
		t.Fatalf("%d reservations for %d units", won.Load(), units)
	}
	for u := range perBuyer {
		if perBuyer[u].Load() > 1 {
			t.Fatalf("buyer %d holds %d units", u, perBuyer[u].Load())
		}
	}
	if left, _ := s.Left(ctx, 7); left != 0 {
		t.Fatalf("stock left %d, want 0", left)
	}
	if n := rdb.HLen(ctx, s.ItemKeys(7).Orders).Val(); n != units {
		t.Fatalf("%d reservations recorded", n)
	}
	if n := rdb.XLen(ctx, s.ItemKeys(7).Outbox).Val(); n != units {
		t.Fatalf("%d outbox entries", n)
	}
	t.Logf("won=%d sold_out=%d duplicate=%d", won.Load(), soldOut.Load(), dup.Load())
}

// The reservation stores the order's QUEUED view with it (also after Redis
// lost its script cache); a refused reservation leaves no view behind.
func TestReserveStoresQueuedView(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	views := orderstatus.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 1, 2); err != nil {
		t.Fatal(err)
	}
	a := msg(1, 10)
	if left, err := s.Reserve(ctx, a); err != nil || left != 1 {
		t.Fatalf("reserve: left=%d err=%v", left, err)
	}
	if v, ok, err := views.Status(ctx, a.OrderID); err != nil || !ok || v != a.QueuedView() {
		t.Fatalf("QUEUED view: %+v %v %v, want %+v", v, ok, err, a.QueuedView())
	}
	again := msg(1, 10)
	var dup *stock.AlreadyReservedError
	if _, err := s.Reserve(ctx, again); !errors.As(err, &dup) || dup.OrderID != a.OrderID {
		t.Fatalf("same buyer again: %v", err)
	}
	// Redis forgets its scripts (restart, SCRIPT FLUSH): EVAL takes over.
	if err := rdb.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	b := msg(1, 11)
	if left, err := s.Reserve(ctx, b); err != nil || left != 0 {
		t.Fatalf("reserve after SCRIPT FLUSH: left=%d err=%v", left, err)
	}
	late := msg(1, 12)
	if _, err := s.Reserve(ctx, late); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("want sold out, got %v", err)
	}
	for _, m := range []order.Message{again, late} {
		if _, ok, _ := views.Status(ctx, m.OrderID); ok {
			t.Fatalf("refused order %s left a view", m.OrderID)
		}
	}
}

// A released or retired order is marked for good: a repair's Restore, working
// from a picture read before the release, cannot put the unit's reservation
// back, so the unit is never given back twice. A live order's lost
// reservation is put back once.
func TestReleaseMarksTheOrderAndRestoreRefusesIt(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 7, 3); err != nil {
		t.Fatal(err)
	}
	a, b, c := msg(7, 1), msg(7, 2), msg(7, 3)
	for _, m := range []order.Message{a, b, c} {
		if _, err := s.Reserve(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := s.Release(ctx, 7, a.OrderID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if ok, err := s.Retire(ctx, 7, b.OrderID); err != nil || !ok {
		t.Fatalf("retire: %v %v", ok, err)
	}
	for _, m := range []order.Message{a, b} {
		if ok, err := s.Restore(ctx, m); err != nil || ok {
			t.Fatalf("restore of released %s: %v %v", m.OrderID, ok, err)
		}
		if ok, _ := s.Release(ctx, 7, m.OrderID); ok {
			t.Fatalf("second give-back of %s", m.OrderID)
		}
	}
	rdb.HDel(ctx, s.ItemKeys(7).Orders, c.OrderID) // Redis lost c's reservation
	for i, want := range []bool{true, false} {
		if ok, err := s.Restore(ctx, c); err != nil || ok != want {
			t.Fatalf("restore #%d of c: %v %v, want %v", i, ok, err, want)
		}
	}
	st, err := s.ReadItemState(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if st.Left != 1 || len(st.Reservations) != 1 || len(st.Marks) != 3 || !st.Released[a.OrderID] || !st.Released[b.OrderID] || st.Released[c.OrderID] {
		t.Fatalf("state %+v: want left 1 (a released, b retired), c held, 3 marks, a and b released", st)
	}
}

// RestoreAll is Restore of many orders of one item, chunk by chunk: every
// lost reservation and mark comes back once, a released order never.
func TestRestoreAll(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const n = 1203 // more than two chunks
	ms := make([]order.Message, n)
	for i := range ms {
		ms[i] = msg(8, int64(i+1))
	}
	if _, err := s.Release(ctx, 8, ms[7].OrderID); err != nil { // released: never put back
		t.Fatal(err)
	}
	for i, want := range []int{n - 1, 0} {
		if got, err := s.RestoreAll(ctx, 8, ms); err != nil || got != want {
			t.Fatalf("RestoreAll #%d: %d %v, want %d", i, got, err, want)
		}
	}
	st, err := s.ReadItemState(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Reservations) != n-1 || len(st.Marks) != n-1 || st.Reservations[ms[7].OrderID].OrderID != "" {
		t.Fatalf("%d reservations, %d marks; want %d of each, none for the released order", len(st.Reservations), len(st.Marks), n-1)
	}
	if _, err := s.RestoreAll(ctx, 9, ms[:1]); err == nil {
		t.Fatal("a message of another item restored")
	}
}
