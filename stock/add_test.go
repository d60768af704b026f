package stock_test

import (
	"context"
	"testing"

	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/testkit"
)

// An add whose transaction failed, recounted from the stock row (which never
// held it) before its undo ran: the units come off once, by the recount; the
// undo finds nothing left to take back.
func TestUndoAddAfterAFencedRecount(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const item, row = 7, 10
	if _, err := s.Load(ctx, item, row); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reserve(ctx, msg(item, 1)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddUnits(ctx, item, "add-1", 5); err != nil {
		t.Fatal(err)
	}
	// The add's commit failed: the row is still 10. A recount runs first.
	if old, want, err := s.Recount(ctx, item, row, nil, stock.Set); err != nil || old != 14 || want != 9 {
		t.Fatalf("recount: old %d want %d err %v; want 14 -> 9", old, want, err)
	}
	if undone, err := s.UndoAdd(ctx, item, "add-1"); err != nil || undone {
		t.Fatalf("undo after the recount: undone %v err %v; want nothing to undo", undone, err)
	}
	if left, _ := s.Left(ctx, item); left != row-1 {
		t.Fatalf("stock_left %d, want %d (the row minus the one reservation)", left, row-1)
	}

	// Without a recount between, the undo takes the add back once.
	if _, err := s.AddUnits(ctx, item, "add-2", 3); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		if undone, err := s.UndoAdd(ctx, item, "add-2"); err != nil || undone != want {
			t.Fatalf("undo %d: %v %v, want %v", i+1, undone, err, want)
		}
	}
	if left, _ := s.Left(ctx, item); left != row-1 {
		t.Fatalf("stock_left %d after the undo, want %d", left, row-1)
	}
	// A check does not forget adds.
	if _, err := s.AddUnits(ctx, item, "add-3", 2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Recount(ctx, item, row, nil, stock.Check); err != nil {
		t.Fatal(err)
	}
	if undone, err := s.UndoAdd(ctx, item, "add-3"); err != nil || !undone {
		t.Fatalf("undo after a check: %v %v, want undone", undone, err)
	}
}

// Units added while a recount's shortfall is open cover it first: only the
// rest goes on sale, and an undo gives the shortfall back exactly.
func TestAddCoversTheShortfallFirst(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const item = 8
	if _, err := s.Load(ctx, item, 5); err != nil {
		t.Fatal(err)
	}
	for u := range int64(3) {
		if _, err := s.Reserve(ctx, msg(item, 100+u)); err != nil {
			t.Fatal(err)
		}
	}
	short := func() int64 { n, _ := rdb.Get(ctx, s.ItemKeys(item).Short).Int64(); return n }
	// Redis lost writes: the stock row holds 1 unit for 3 live reservations.
	if _, want, err := s.Recount(ctx, item, 1, nil, stock.Set); err != nil || want != 0 || short() != 2 {
		t.Fatalf("recount: want %d short %d err %v; want 0 and 2", want, short(), err)
	}
	if _, err := s.AddUnits(ctx, item, "add-a", 5); err != nil {
		t.Fatal(err)
	}
	if left, _ := s.Left(ctx, item); left != 3 || short() != 0 {
		t.Fatalf("after adding 5: stock_left %d short %d; want 3 and 0", left, short())
	}
	if undone, err := s.UndoAdd(ctx, item, "add-a"); err != nil || !undone {
		t.Fatalf("undo: %v %v", undone, err)
	}
	if left, _ := s.Left(ctx, item); left != 0 || short() != 2 {
		t.Fatalf("after the undo: stock_left %d short %d; want 0 and 2", left, short())
	}
	// An add smaller than the shortfall puts nothing on sale; a check recount
	// of the row with it agrees.
	if _, err := s.AddUnits(ctx, item, "add-b", 1); err != nil {
		t.Fatal(err)
	}
	if old, want, err := s.Recount(ctx, item, 2, nil, stock.Check); err != nil || old != 0 || want != 0 || short() != 1 {
		t.Fatalf("after adding 1: old %d want %d short %d err %v; want 0, 0, 1", old, want, short(), err)
	}
}
