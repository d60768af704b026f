package stock_test

import (
	"context"
	"testing"

	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/stock"
)

// An add whose transaction failed, recounted from the stock row (which never
// held it) before its undo ran: the units come off once, by the recount; the
// undo finds nothing left to take back.
func TestUndoAddAfterAFencedRecount(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
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
