package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// DeductStock commits while snapshots are read: every snapshot is one
// moment, so its stock row and its unrestored deductions always account for
// every unit (read with separate statements, a deduction committing between
// the row read and the deductions read made them disagree by one).
func TestReadItemStateIsOneMoment(t *testing.T) {
	const units = 60
	st, it := newSale(t, units)
	ctx := context.Background()
	for i := range units {
		queued(t, st, fmt.Sprintf("s-%02d", i), int64(i+1), it.ID)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(done)
		for i := range units {
			if _, _, err := st.DeductStock(ctx, fmt.Sprintf("s-%02d", i), it.ID, time.Minute); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	reads := 0
	for {
		s, err := st.ReadItemState(ctx, it.ID)
		if err != nil {
			t.Fatal(err)
		}
		reads++
		if got := s.Stock.Stock + int64(len(s.Unrestored())); got != units {
			t.Fatalf("snapshot %d: stock row %d + unrestored %d != %d", reads, s.Stock.Stock, len(s.Unrestored()), units)
		}
		if s.Stock.Version != int64(len(s.Deductions)) {
			t.Fatalf("snapshot %d: version %d with %d deductions", reads, s.Stock.Version, len(s.Deductions))
		}
		select {
		case <-done:
			wg.Wait()
			t.Logf("%d consistent snapshots during %d deductions", reads, units)
			return
		default:
		}
	}
}

// FenceStock holds the stock row: a DeductStock waits until the fenced work
// is done, and a fence whose snapshot is stale re-reads the deductions.
func TestFenceStockHoldsTheRow(t *testing.T) {
	st, it := newSale(t, 5)
	ctx := context.Background()
	queued(t, st, "f-1", 1, it.ID)
	queued(t, st, "f-2", 2, it.ID)
	snap, err := st.ReadItemState(ctx, it.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeductStock(ctx, "f-1", it.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	deducted := make(chan error, 1)
	moved, err := st.FenceStock(ctx, it.ID, snap.Stock, snap.Unrestored(), func(row store.Stock, ded []string) error {
		if row.Stock != 4 || len(ded) != 1 || ded[0] != "f-1" {
			return fmt.Errorf("fenced view row %+v deductions %v, want 4 and [f-1]", row, ded)
		}
		go func() { _, _, err := st.DeductStock(ctx, "f-2", it.ID, time.Minute); deducted <- err }()
		select {
		case err := <-deducted:
			return fmt.Errorf("a deduction committed inside the fence: %v", err)
		case <-time.After(300 * time.Millisecond): // it waits on the row lock
		}
		return nil
	})
	if err != nil || !moved {
		t.Fatalf("fence: moved %v, %v", moved, err)
	}
	if err := <-deducted; err != nil {
		t.Fatal(err)
	}
}

// WithHeldOrder runs only for a row that holds a unit (QUEUED too), not for
// a closed or missing one; HeldOrders lists exactly those rows.
func TestWithHeldOrder(t *testing.T) {
	st, it := newSale(t, 5)
	ctx := context.Background()
	queued(t, st, "l-1", 1, it.ID)
	queued(t, st, "l-2", 2, it.ID)
	queued(t, st, "l-3", 3, it.ID)
	if ran, err := st.WithHeldOrder(ctx, "l-1", func(store.Order) error { return nil }); err != nil || !ran {
		t.Fatalf("QUEUED order: ran %v %v", ran, err)
	}
	if _, _, err := st.DeductStock(ctx, "l-1", it.ID, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ran, err := st.WithHeldOrder(ctx, "l-1", func(o store.Order) error { return nil }); err != nil || !ran {
		t.Fatalf("live order: ran %v %v", ran, err)
	}
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: "l-3", UserID: 3, ItemID: it.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}); err != nil {
		t.Fatal(err)
	}
	if ran, err := st.WithHeldOrder(ctx, "l-3", func(store.Order) error { return nil }); err != nil || ran {
		t.Fatalf("closed order: ran %v %v", ran, err)
	}
	if ran, err := st.WithHeldOrder(ctx, "missing", func(store.Order) error { return nil }); err != nil || ran {
		t.Fatalf("missing order: ran %v %v", ran, err)
	}
	held, err := st.HeldOrders(ctx, it.ID)
	got := map[string]order.Status{}
	for _, o := range held {
		got[o.OrderID] = o.Status
	}
	if err != nil || len(got) != 2 || got["l-1"] != order.StatusPendingPayment || got["l-2"] != order.StatusQueued {
		t.Fatalf("held orders %v %v, want l-1 PENDING_PAYMENT and l-2 QUEUED", got, err)
	}
}
