package stock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// fencedRecount recounts stock_left as the reconciler's repair and the
// warm-up do: the stock row locked, the deductions read under the lock,
// counted in one script. between, when set, runs under the lock before the
// count (before) or after it (after).
func fencedRecount(t *testing.T, st *store.Store, s *stock.Store, itemID int64, mode stock.CountMode, before, after func()) (old, want int64) {
	t.Helper()
	ctx := context.Background()
	_, err := st.FenceStock(ctx, itemID, store.Stock{Version: -1}, nil, func(row store.Stock, deducted []string) error {
		if before != nil {
			before()
		}
		var err error
		old, want, err = s.Recount(ctx, itemID, row.Stock, deducted, mode)
		if after != nil {
			after()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return old, want
}

// closeUndeducted closes an order whose saga never took its stock-row unit,
// as the saga's early paths (a window that passed while QUEUED, a cancel
// written at the door) and the reconciler's give-back do: the row CANCELLED,
// nothing restored; the caller releases the Redis unit.
func closeUndeducted(t *testing.T, st *store.Store, m order.Message) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: m.OrderID, UserID: m.UserID, ItemID: m.ItemID, PayBy: m.PayBy}); err != nil {
		t.Fatal(err)
	}
	res, err := st.CloseOrder(ctx, store.Order{OrderID: m.OrderID, UserID: m.UserID, ItemID: m.ItemID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled})
	if err != nil || res.Restored || res.Order.Status != order.StatusCancelled {
		t.Fatalf("close %s: %+v %v", m.OrderID, res, err)
	}
}

func deduct(t *testing.T, st *store.Store, m order.Message) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: m.OrderID, UserID: m.UserID, ItemID: m.ItemID, PayBy: m.PayBy}); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.DeductStock(ctx, m.OrderID, m.ItemID, time.Minute); err != nil || !ok {
		t.Fatalf("deduct %s: %v %v", m.OrderID, ok, err)
	}
}

func sale(t *testing.T, st *store.Store, s *stock.Store, units int64) store.Item {
	t.Helper()
	ctx := context.Background()
	testkit.UniqueItemIDs(t, st)
	it, err := st.CreateItem(ctx, store.Item{Name: "shortfall", PriceCents: 100, StockTotal: units,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, it.ID, units); err != nil {
		t.Fatal(err)
	}
	return it
}

func reserve(t *testing.T, s *stock.Store, itemID, userID int64) order.Message {
	t.Helper()
	m := msg(itemID, userID)
	payBy := order.Deadline(m.ReservedAt, 60)
	m.PayBy = &payBy
	if _, err := s.Reserve(context.Background(), m); err != nil {
		t.Fatalf("reserve for buyer %d: %v", userID, err)
	}
	return m
}

// The release of a unit its order never deducted in MySQL (the saga's early
// close, the reconciler's give-back of a door-cancelled order) is not
// fenced; the recount is. Whichever comes first, under the recount's lock,
// the unit is counted once: the recount subtracts a reservation it still
// sees and the release adds it back, or the release already removed it and
// the recount counts it from the stock row. Every script is atomic, and no
// deduction can commit for a closed row, so there is no third order.
func TestUndeductedReleaseAroundAFencedRecountCountsTheUnitOnce(t *testing.T) {
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	for _, release := range []string{"before", "after"} {
		t.Run("release "+release+" the count", func(t *testing.T) {
			it := sale(t, st, s, 3)
			paid := reserve(t, s, it.ID, 1)
			deduct(t, st, paid)
			late := reserve(t, s, it.ID, 2)
			closeUndeducted(t, st, late)
			rel := func() {
				if ok, err := s.Release(ctx, it.ID, late.OrderID); err != nil || !ok {
					t.Errorf("release: %v %v", ok, err)
				}
			}
			if release == "before" {
				fencedRecount(t, st, s, it.ID, stock.Set, rel, nil)
			} else {
				fencedRecount(t, st, s, it.ID, stock.Set, nil, rel)
			}
			if left, _ := s.Left(ctx, it.ID); left != 2 {
				t.Fatalf("stock_left %d, want 2 (3 units, 1 deducted)", left)
			}
			if old, want := fencedRecount(t, st, s, it.ID, stock.Check, nil, nil); old != want {
				t.Fatalf("stock_left %d, a recount wants %d", old, want)
			}
			reserve(t, s, it.ID, 3)
			reserve(t, s, it.ID, 4)
			if _, err := s.Reserve(ctx, msg(it.ID, 5)); !errors.Is(err, stock.ErrSoldOut) {
				t.Fatalf("a fourth unit of 3 was sold: %v", err)
			}
		})
	}
}

// A recount that finds more reservations not deducted yet than the stock
// row has units (Redis lost writes in a failover: a relayed order's
// reservation was lost, its unit sold again, and the lost one put back once
// its order deducted) clamps stock_left at 0. An early close of one of those
// orders (a window that passed while QUEUED, a door cancel) must not put its
// unit on sale then: the stock row has none for it, and the buyer who took
// it would get a 202 and then STOCK_EXHAUSTED (or REFUNDED after paying).
// Its release covers the shortfall instead; once the shortfall is covered,
// releases put units on sale again.
func TestEarlyCloseAfterAClampedRecountPutsNoPhantomUnitOnSale(t *testing.T) {
	st, s, it, again, other := shortOne(t)
	ctx := context.Background()

	// Buyer 2's order is closed before its saga took a unit.
	closeUndeducted(t, st, again)
	if ok, err := s.Release(ctx, it.ID, again.OrderID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if left, _ := s.Left(ctx, it.ID); left != 0 {
		t.Fatalf("stock_left %d after the early close, want 0: the stock row has 1 unit and buyer 3 holds it", left)
	}
	if _, err := s.Reserve(ctx, msg(it.ID, 4)); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("buyer 4 was sold a unit the stock row does not have: %v", err)
	}
	if old, want := fencedRecount(t, st, s, it.ID, stock.Check, nil, nil); old != want {
		t.Fatalf("stock_left %d, a recount wants %d", old, want)
	}

	// Buyer 3 closes too: the shortfall is covered, its unit goes on sale.
	closeUndeducted(t, st, other)
	if ok, err := s.Release(ctx, it.ID, other.OrderID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if left, _ := s.Left(ctx, it.ID); left != 1 {
		t.Fatalf("stock_left %d once the shortfall is covered, want 1", left)
	}
	if old, want := fencedRecount(t, st, s, it.ID, stock.Check, nil, nil); old != want {
		t.Fatalf("stock_left %d, a recount wants %d", old, want)
	}
}

// The same shortfall covered the other way: buyer 2's saga takes the row's
// last unit and buyer 3's finds none (STOCK_EXHAUSTED, retired). Then the
// shortfall is covered and a unit that comes back goes on sale.
func TestRetiredPhantomCoversTheShortfall(t *testing.T) {
	st, s, it, again, other := shortOne(t)
	ctx := context.Background()
	deduct(t, st, again)
	if ok, err := s.Retire(ctx, it.ID, other.OrderID); err != nil || !ok {
		t.Fatalf("retire: %v %v", ok, err)
	}
	if left, _ := s.Left(ctx, it.ID); left != 0 {
		t.Fatalf("stock_left %d after the retire, want 0", left)
	}
	// Buyer 2 cancels after its deduction: the row gets its unit back, and
	// so does the sale.
	res, err := st.CloseOrder(ctx, store.Order{OrderID: again.OrderID, UserID: again.UserID, ItemID: it.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled})
	if err != nil || !res.Restored {
		t.Fatalf("close: %+v %v", res, err)
	}
	if ok, err := s.Release(ctx, it.ID, again.OrderID); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if left, _ := s.Left(ctx, it.ID); left != 1 {
		t.Fatalf("stock_left %d, want 1 (the unit buyer 2 gave back)", left)
	}
	if old, want := fencedRecount(t, st, s, it.ID, stock.Check, nil, nil); old != want {
		t.Fatalf("stock_left %d, a recount wants %d", old, want)
	}
}

// shortOne is a sale of 2 units after a Redis failover lost a relayed
// reservation: buyer 1's reservation is relayed, then lost with the unit
// it took; buyer 2 (again) takes that unit again, buyer 3 (other) the other
// one. Buyer 1's saga deducts; the reconciler puts its reservation back and
// recounts: 1 unit in the row, 2 reservations not deducted, stock_left 0.
func shortOne(t *testing.T) (st *store.Store, s *stock.Store, it store.Item, again, other order.Message) {
	t.Helper()
	st, _ = testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	s = stock.New(rdb, prefix)
	ctx := context.Background()
	it = sale(t, st, s, 2)
	k := s.ItemKeys(it.ID)
	lost := reserve(t, s, it.ID, 1)
	if err := rdb.HDel(ctx, k.Orders, lost.OrderID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HDel(ctx, k.Buyers, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Incr(ctx, k.Stock).Err(); err != nil {
		t.Fatal(err)
	}
	again = reserve(t, s, it.ID, 2)
	other = reserve(t, s, it.ID, 3)
	deduct(t, st, lost)
	if ok, err := s.Restore(ctx, lost); err != nil || !ok {
		t.Fatalf("restore: %v %v", ok, err)
	}
	if old, want := fencedRecount(t, st, s, it.ID, stock.Set, nil, nil); old != 0 || want != 0 {
		t.Fatalf("recount: old %d want %d, want 0 and 0 (clamped)", old, want)
	}
	return st, s, it, again, other
}
