package stocktwin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

// Store is what Contract holds to stock's rules: the methods of
// stock.Store whose rules live in its Lua scripts, and the reads that show
// their effect. Both *stock.Store and *Twin are one.
type Store interface {
	Load(ctx context.Context, itemID, units int64) (bool, error)
	Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (old, want int64, err error)
	Left(ctx context.Context, itemID int64) (int64, error)
	LeftMany(ctx context.Context, itemIDs []int64) (map[int64]int64, error)
	Reserve(ctx context.Context, r order.Message) (int64, error)
	Release(ctx context.Context, itemID int64, orderID string) (bool, error)
	Retire(ctx context.Context, itemID int64, orderID string) (bool, error)
	RestoreAll(ctx context.Context, itemID int64, ms []order.Message) (int, error)
	BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error)
	BuyerOrders(ctx context.Context, itemIDs []int64, userID int64) (map[int64]string, error)
	MarkedBuyers(ctx context.Context, itemID, max int64) (map[int64]struct{}, bool, error)
	ReadItemState(ctx context.Context, itemID int64) (stock.ItemState, error)
	Pulses(ctx context.Context, itemIDs []int64) (map[int64]stock.Pulse, error)
	AddUnits(ctx context.Context, itemID int64, addID string, n int64) (bool, error)
	UndoAdd(ctx context.Context, itemID int64, addID string) (bool, error)
	AnnounceItem(ctx context.Context, itemID int64, unitsBack bool) (int64, error)
	// LoseStock deletes the item's stock key (the real store's contract
	// test does it with DEL): what a Redis that lost writes leaves.
	LoseStock(itemID int64)
}

var _ Store = (*Twin)(nil)

// Contract runs stock's rules on stores newStore makes, each subtest on a
// fresh one holding nothing: stock's own tests run it on the real store in
// Redis, stocktwin's on the twin, so a twin that drifts from the scripts
// fails here rather than in the tests that trust it.
func Contract(t *testing.T, newStore func(t *testing.T) Store) {
	for _, c := range contract {
		t.Run(c.name, func(t *testing.T) {
			c.run(&checker{t: t, s: newStore(t), ctx: context.Background()})
		})
	}
}

const itemID = 7 // the item every case sells

// checker wraps a store with the contract's assertions.
type checker struct {
	t   *testing.T
	s   Store
	ctx context.Context
	n   int
}

// msg is a reservation of itemID for buyer with a fresh order id.
func (c *checker) msg(buyer int64) order.Message {
	c.n++
	payBy := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return order.Message{OrderID: fmt.Sprintf("01CONTRACT%016d", c.n), ItemID: itemID, UserID: buyer,
		ReservedAt: time.Date(2029, 12, 31, 23, 45, 0, 0, time.UTC), PayBy: &payBy}
}

func (c *checker) load(n int64) {
	c.t.Helper()
	if ok, err := c.s.Load(c.ctx, itemID, n); err != nil || !ok {
		c.t.Fatalf("load %d: %v %v", n, ok, err)
	}
}

// reserve takes a unit for buyer, which must succeed with left units left.
func (c *checker) reserve(buyer, left int64) order.Message {
	c.t.Helper()
	m := c.msg(buyer)
	if n, err := c.s.Reserve(c.ctx, m); err != nil || n != left {
		c.t.Fatalf("reserve for buyer %d: left %d err %v; want %d left", buyer, n, err, left)
	}
	return m
}

func (c *checker) left(want int64) {
	c.t.Helper()
	if n, err := c.s.Left(c.ctx, itemID); err != nil || n != want {
		c.t.Fatalf("stock_left %d (err %v), want %d", n, err, want)
	}
}

func (c *checker) recount(row int64, deducted []string, mode stock.CountMode, old, want int64) {
	c.t.Helper()
	if o, w, err := c.s.Recount(c.ctx, itemID, row, deducted, mode); err != nil || o != old || w != want {
		c.t.Fatalf("%s recount of row %d: %d -> %d (err %v), want %d -> %d", mode, row, o, w, err, old, want)
	}
}

func (c *checker) giveBack(release bool, id string, want bool) {
	c.t.Helper()
	f := c.s.Retire
	if release {
		f = c.s.Release
	}
	if ok, err := f(c.ctx, itemID, id); err != nil || ok != want {
		c.t.Fatalf("give back %s (release %v): %v %v, want %v", id, release, ok, err, want)
	}
}

func (c *checker) add(id string, n int64, loaded bool) {
	c.t.Helper()
	if ok, err := c.s.AddUnits(c.ctx, itemID, id, n); err != nil || ok != loaded {
		c.t.Fatalf("add %s of %d: loaded %v err %v, want %v", id, n, ok, err, loaded)
	}
}

func (c *checker) undo(id string, want bool) {
	c.t.Helper()
	if ok, err := c.s.UndoAdd(c.ctx, itemID, id); err != nil || ok != want {
		c.t.Fatalf("undo add %s: %v %v, want %v", id, ok, err, want)
	}
}

func (c *checker) mark(buyer int64, want string) {
	c.t.Helper()
	id, ok, err := c.s.BuyerOrder(c.ctx, itemID, buyer)
	if err != nil || id != want || ok != (want != "") {
		c.t.Fatalf("mark of buyer %d: %q %v %v, want %q", buyer, id, ok, err, want)
	}
}

var contract = []struct {
	name string
	run  func(c *checker)
}{
	{"load sets a missing key only", func(c *checker) {
		if _, err := c.s.Left(c.ctx, itemID); !errors.Is(err, stock.ErrNotLoaded) {
			c.t.Fatalf("left of an itemID never loaded: %v, want ErrNotLoaded", err)
		}
		if m, err := c.s.LeftMany(c.ctx, []int64{itemID}); err != nil || len(m) != 0 {
			c.t.Fatalf("LeftMany of an itemID never loaded: %v %v, want it absent", m, err)
		}
		c.load(3)
		if ok, err := c.s.Load(c.ctx, itemID, 9); err != nil || ok {
			c.t.Fatalf("second load: %v %v, want live stock left alone", ok, err)
		}
		c.left(3)
		if m, err := c.s.LeftMany(c.ctx, []int64{itemID, itemID + 1}); err != nil || len(m) != 1 || m[itemID] != 3 {
			c.t.Fatalf("LeftMany: %v %v, want only itemID %d with 3", m, err, itemID)
		}
	}},
	{"reserve: not loaded, one per buyer, never below zero", func(c *checker) {
		if _, err := c.s.Reserve(c.ctx, c.msg(1)); !errors.Is(err, stock.ErrNotLoaded) {
			c.t.Fatalf("reserve before load: %v, want ErrNotLoaded", err)
		}
		c.mark(1, "")
		c.load(2)
		first := c.reserve(1, 1)
		var already *stock.AlreadyReservedError
		if _, err := c.s.Reserve(c.ctx, c.msg(1)); !errors.As(err, &already) || already.OrderID != first.OrderID {
			c.t.Fatalf("second order of buyer 1: %v, want AlreadyReserved %s", err, first.OrderID)
		}
		// The same order again (a retry whose reply was lost) is its unit.
		if n, err := c.s.Reserve(c.ctx, first); err != nil || n != 1 {
			c.t.Fatalf("retried reservation: left %d err %v, want it taken with 1 left", n, err)
		}
		c.reserve(2, 0)
		if _, err := c.s.Reserve(c.ctx, c.msg(3)); !errors.Is(err, stock.ErrSoldOut) {
			c.t.Fatalf("reserve at zero: %v, want ErrSoldOut", err)
		}
		c.left(0)
		c.mark(1, first.OrderID)
		c.mark(3, "")
		st, err := c.s.ReadItemState(c.ctx, itemID)
		if err != nil || st.Left != 0 || len(st.Reservations) != 2 || len(st.Marks) != 2 || len(st.Released) != 0 {
			c.t.Fatalf("state %+v %v, want 0 left, 2 reservations and marks", st, err)
		}
		if r := st.Reservations[first.OrderID]; r.UserID != 1 || r.ItemID != itemID || !r.ReservedAt.Equal(first.ReservedAt) {
			c.t.Fatalf("reservation %+v, want %+v", r, first)
		}
		p, err := c.s.Pulses(c.ctx, []int64{itemID})
		if err != nil || p[itemID] != (stock.Pulse{Left: 0, Loaded: true, Marks: 2, Outbox: 2}) {
			c.t.Fatalf("pulse %+v %v, want 0 left, 2 marks, 2 in the outbox", p[itemID], err)
		}
	}},
	{"release gives the unit back once, retire never; the mark stays", func(c *checker) {
		c.load(2)
		a, b := c.reserve(1, 1), c.reserve(2, 0)
		c.giveBack(true, a.OrderID, true)
		c.left(1)
		c.giveBack(true, a.OrderID, false)
		c.giveBack(false, a.OrderID, false)
		c.left(1)
		c.giveBack(false, b.OrderID, true)
		c.left(1)
		c.giveBack(true, "01NEVERRESERVED000000000000", false)
		c.mark(1, a.OrderID)
		c.mark(2, b.OrderID)
		var already *stock.AlreadyReservedError
		if _, err := c.s.Reserve(c.ctx, c.msg(1)); !errors.As(err, &already) {
			c.t.Fatalf("buyer 1 after its release: %v, want AlreadyReserved (one order per buyer, ever)", err)
		}
		st, err := c.s.ReadItemState(c.ctx, itemID)
		if err != nil || len(st.Reservations) != 0 || len(st.Released) != 3 ||
			!st.Released[a.OrderID] || !st.Released[b.OrderID] || !st.Released["01NEVERRESERVED000000000000"] {
			c.t.Fatalf("state %+v %v, want no reservation and all three released", st, err)
		}
	}},
	{"restore puts back what is missing, never a released order", func(c *checker) {
		c.load(5)
		a := c.reserve(1, 4)
		b, lost := c.msg(2), c.msg(3)
		c.giveBack(true, b.OrderID, false) // released before any restore saw it
		if n, err := c.s.RestoreAll(c.ctx, itemID, []order.Message{a, b, lost}); err != nil || n != 1 {
			c.t.Fatalf("restore: %d %v, want only the lost one", n, err)
		}
		c.mark(3, lost.OrderID)
		c.mark(2, "")
		c.left(4) // restore never moves stock_left: the caller recounts
		st, _ := c.s.ReadItemState(c.ctx, itemID)
		if _, ok := st.Reservations[lost.OrderID]; !ok || len(st.Reservations) != 2 {
			c.t.Fatalf("reservations %v, want %s and %s", st.Reservations, a.OrderID, lost.OrderID)
		}
		// A mark held by another order stays; the reservation is put back.
		other := c.msg(1)
		if n, err := c.s.RestoreAll(c.ctx, itemID, []order.Message{other}); err != nil || n != 1 {
			c.t.Fatalf("restore of a second order of buyer 1: %d %v", n, err)
		}
		c.mark(1, a.OrderID)
		wrong := c.msg(4)
		wrong.ItemID = itemID + 1
		if _, err := c.s.RestoreAll(c.ctx, itemID, []order.Message{wrong}); err == nil {
			c.t.Fatal("restore of another itemID's order: no error")
		}
	}},
	{"recount modes and deductions", func(c *checker) {
		c.recount(5, nil, stock.Check, -1, 5)
		if _, err := c.s.Left(c.ctx, itemID); !errors.Is(err, stock.ErrNotLoaded) {
			c.t.Fatalf("check wrote the key: %v", err)
		}
		c.recount(5, nil, stock.Warm, -1, 5)
		a := c.reserve(1, 4)
		c.reserve(2, 3)
		c.recount(9, nil, stock.Warm, 3, 3) // live stock is left alone
		c.recount(9, nil, stock.Check, 3, 7)
		c.left(3)
		c.recount(5, []string{a.OrderID}, stock.Set, 3, 4) // a's unit is off the row already
		c.left(4)
	}},
	{"a shortfall is covered by the next releases before any unit goes on sale", func(c *checker) {
		c.load(3)
		a, b, d := c.reserve(1, 2), c.reserve(2, 1), c.reserve(3, 0)
		c.recount(1, nil, stock.Set, 0, 0) // 3 reservations, 1 unit: 2 short
		c.giveBack(true, a.OrderID, true)
		c.left(0)
		c.giveBack(false, b.OrderID, true)
		c.left(0)
		c.giveBack(true, d.OrderID, true)
		c.left(1)
		c.recount(1, nil, stock.Set, 1, 1) // nothing short: the next count clears it
	}},
	{"adds: once per id, not before load, forgotten by a recount", func(c *checker) {
		c.add("add-0", 4, false)
		c.load(2)
		c.add("add-1", 3, true)
		c.add("add-1", 3, true)
		c.left(5)
		c.undo("add-1", true)
		c.undo("add-1", false)
		c.left(2)
		c.add("add-2", 3, true)
		c.recount(2, nil, stock.Check, 5, 2) // a check forgets nothing
		c.recount(2, nil, stock.Set, 5, 2)   // the row never held add-2
		c.undo("add-2", false)
		c.left(2)
	}},
	{"an add covers the shortfall first; its undo gives it back", func(c *checker) {
		c.load(3)
		a, b := c.reserve(1, 2), c.reserve(2, 1)
		c.reserve(3, 0)
		c.recount(0, nil, stock.Set, 0, 0) // 3 short
		c.add("add-1", 2, true)            // covers 2 of them
		c.left(0)
		c.add("add-2", 4, true) // covers the last one, 3 on sale
		c.left(3)
		c.undo("add-2", true)
		c.left(0)
		c.giveBack(true, a.OrderID, true) // 1 short again: this covers it
		c.left(0)
		c.undo("add-1", true) // 2 short
		c.giveBack(true, b.OrderID, true)
		c.left(0)
	}},
	{"a lost stock key stays lost until a recount loads it", func(c *checker) {
		c.load(3)
		a, b := c.reserve(1, 2), c.reserve(2, 1)
		c.s.LoseStock(itemID)
		c.giveBack(true, a.OrderID, true) // no INCR: the warm-up counts this unit from the row
		if _, err := c.s.Left(c.ctx, itemID); !errors.Is(err, stock.ErrNotLoaded) {
			c.t.Fatalf("a release recreated the lost key: %v", err)
		}
		if _, err := c.s.Reserve(c.ctx, c.msg(3)); !errors.Is(err, stock.ErrNotLoaded) {
			c.t.Fatalf("reserve on a lost key: %v, want ErrNotLoaded", err)
		}
		c.add("add-1", 2, false)
		c.recount(3, nil, stock.Warm, -1, 2) // the row's 3 less b's live reservation
		c.giveBack(true, b.OrderID, true)
		c.left(3)
	}},
	{"buyers, pulses and revisions", func(c *checker) {
		c.load(5)
		a := c.reserve(1, 4)
		c.reserve(2, 3)
		if u, ok, err := c.s.MarkedBuyers(c.ctx, itemID, 2); err != nil || !ok || len(u) != 2 {
			c.t.Fatalf("marked buyers: %v %v %v, want 1 and 2", u, ok, err)
		}
		if _, ok, err := c.s.MarkedBuyers(c.ctx, itemID, 1); err != nil || ok {
			c.t.Fatalf("marked buyers over max: ok %v %v, want false", ok, err)
		}
		if m, err := c.s.BuyerOrders(c.ctx, []int64{itemID, itemID + 1}, 1); err != nil || len(m) != 1 || m[itemID] != a.OrderID {
			c.t.Fatalf("orders of buyer 1: %v %v", m, err)
		}
		for want := int64(1); want <= 2; want++ {
			if rev, err := c.s.AnnounceItem(c.ctx, itemID, want == 2); err != nil || rev != want {
				c.t.Fatalf("announce: rev %d %v, want %d", rev, err, want)
			}
		}
		p, err := c.s.Pulses(c.ctx, []int64{itemID, itemID + 1})
		if err != nil || p[itemID] != (stock.Pulse{Left: 3, Loaded: true, Rev: 2, Marks: 2, Outbox: 2}) || p[itemID+1] != (stock.Pulse{}) {
			c.t.Fatalf("pulses %+v %v", p, err)
		}
	}},
}
