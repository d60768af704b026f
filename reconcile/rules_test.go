package reconcile

import (
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
)

// Each rule alone, on a snapshot of the world: what it nominates, and what
// it leaves to the pipeline (young orders, running sagas).
func TestRuleFunctions(t *testing.T) {
	w := newWorld(10)
	long, now := time.Now().Add(-time.Minute), time.Now()
	// live, reservation lost
	lost := w.reserve(1, long)
	w.persistAndDeduct(lost, now.Add(time.Hour))
	delete(w.resv, lost)
	// cancelled, unit held, saga gone
	held := w.reserve(2, long)
	w.persistAndDeduct(held, now.Add(time.Hour))
	w.orders[held].Status = order.StatusCancelled
	w.deds[held].Restored = true
	w.row.Stock++
	delete(w.running, held)
	// cancelled at the door, unit held, saga running: not drift
	door := w.reserve(3, long)
	w.persistAndDeduct(door, now.Add(time.Hour))
	w.orders[door].Status = order.StatusCancelled
	// reserved long ago, no row, no saga, no outbox entry
	handoff := w.reserve(4, long)
	// reserved just now, nothing else yet: not drift
	w.reserve(5, now)
	// QUEUED for a minute
	queued := w.reserve(6, long)
	w.orders[queued] = &store.Order{OrderID: queued, UserID: 6, ItemID: 1, Status: order.StatusQueued, CreatedAt: long}
	w.running[queued] = true
	// reserved a minute ago, its row written just now (it waited in the
	// queue): not stuck
	late := w.reserve(7, long)
	w.orders[late] = &store.Order{OrderID: late, UserID: 7, ItemID: 1, Status: order.StatusQueued, CreatedAt: now}
	w.running[late] = true

	// restored to before the saga's last write: PENDING_PAYMENT, saga
	// completed; and to before the order: no row, saga completed
	behind := w.reserve(8, long)
	w.persistAndDeduct(behind, now.Add(time.Hour))
	delete(w.running, behind)
	gone := w.reserve(9, long)
	w.lostRow[gone] = true

	it, err := snapshot.Load(t.Context(), snapshot.Sources{MySQL: mysqlSide{w}, Redis: redisSide{w}, Outbox: outboxSide{w}, Workflows: sagaSide{w}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	ids := func(fs []Finding) []string {
		var out []string
		for _, f := range fs {
			out = append(out, f.OrderID)
		}
		return out
	}
	one := func(name string, fs []Finding, want string) {
		t.Helper()
		if got := ids(fs); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %v, want [%s]", name, got, want)
		}
	}
	one("held orders without reservation", heldOrdersWithoutReservation(it, grace), lost)
	one("final orders holding units", finalOrdersHoldingUnits(it, grace), held)
	one("lost handoffs", lostHandoffs(it, grace), handoff)
	one("stuck queued", stuckQueued(it, grace), queued)
	kinds := map[string]string{}
	for _, f := range rowsBehindSagas(it, grace) {
		kinds[f.OrderID] = f.Kind
	}
	if len(kinds) != 2 || kinds[behind] != OpenOrderSagaClosed || kinds[gone] != RowLost {
		t.Errorf("rows behind their sagas: %v, want %s: %s and %s: %s", kinds, behind, OpenOrderSagaClosed, gone, RowLost)
	}
	if fs := sagasOfFinalOrders(it, grace); len(fs) != 0 {
		t.Errorf("sagas of final orders: %v (the door's saga is waiting for its wake)", ids(fs))
	}
	if fs := stockRowOffDeductions(it, grace); len(fs) != 0 {
		t.Errorf("stock row: %+v", fs)
	}
	w.row.Stock--
	it, _ = snapshot.Load(t.Context(), snapshot.Sources{MySQL: mysqlSide{w}, Redis: redisSide{w}}, 1)
	if fs := stockRowOffDeductions(it, grace); len(fs) != 1 {
		t.Errorf("stock row one off: %+v", fs)
	}
	if fs := lostHandoffs(it, grace); len(fs) != 0 {
		t.Errorf("lost handoffs without the outbox and the sagas read: %v", ids(fs))
	}
}

// A QUEUED row is a held unit and, without a saga, a waiting handoff: the
// door's row for a pay at the 202 whose message was lost is a lost handoff
// (not merely stuck), and a QUEUED row whose reservation Redis lost is put
// back like a live one.
func TestRulesOnQueuedRows(t *testing.T) {
	w := newWorld(10)
	long, now := time.Now().Add(-time.Minute), time.Now()
	payBy := now.Add(time.Hour)
	paid := now.Add(-30 * time.Second)
	// paid at the 202; its message lost: no saga, no outbox entry
	door := w.reserve(1, long)
	w.orders[door] = &store.Order{OrderID: door, UserID: 1, ItemID: 1, Status: order.StatusQueued, PayBy: &payBy, PaidAt: &paid, CreatedAt: long}
	// persisted by its saga (a backlog: not deducted yet), reservation lost
	lost := w.reserve(2, long)
	w.orders[lost] = &store.Order{OrderID: lost, UserID: 2, ItemID: 1, Status: order.StatusQueued, PayBy: &payBy, CreatedAt: long}
	w.running[lost] = true
	delete(w.resv, lost)
	// persisted by its saga, reservation there: stuck, not lost
	stuck := w.reserve(3, long)
	w.orders[stuck] = &store.Order{OrderID: stuck, UserID: 3, ItemID: 1, Status: order.StatusQueued, CreatedAt: long}
	w.running[stuck] = true

	it, err := snapshot.Load(t.Context(), snapshot.Sources{MySQL: mysqlSide{w}, Redis: redisSide{w}, Outbox: outboxSide{w}, Workflows: sagaSide{w}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	// sagaSide lists a saga for every row: the door's row has none.
	delete(it.Sagas, door)
	ids := func(fs []Finding) map[string]bool {
		out := map[string]bool{}
		for _, f := range fs {
			out[f.OrderID] = true
		}
		return out
	}
	if got := ids(lostHandoffs(it, grace)); len(got) != 1 || !got[door] {
		t.Errorf("lost handoffs %v, want the door's QUEUED row %s", got, door)
	}
	if got := ids(stuckQueued(it, grace)); len(got) != 2 || !got[lost] || !got[stuck] {
		t.Errorf("stuck queued %v, want %s and %s (not the lost handoff %s)", got, lost, stuck, door)
	}
	if got := ids(heldOrdersWithoutReservation(it, grace)); len(got) != 1 || !got[lost] {
		t.Errorf("held orders without reservation %v, want %s", got, lost)
	}
}

// The put-back of a QUEUED row's reservation carries its deadline, and the
// recount after it keeps its unit held.
func TestPutBackQueuedReservation(t *testing.T) {
	w := newWorld(10)
	long := time.Now().Add(-time.Minute)
	payBy := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	id := w.reserve(1, long)
	w.orders[id] = &store.Order{OrderID: id, UserID: 1, ItemID: 1, Status: order.StatusQueued, PayBy: &payBy, CreatedAt: long}
	w.running[id] = true
	delete(w.resv, id)
	delete(w.marks, 1)
	w.left++ // as a recount without the row would have it

	rep := run(t, w, true) // its saga is running: stuck_queued stays, report only
	if rep.Remaining() != 1 || !has(rep, StuckQueued) || !has(rep, PaidUnitOnSale) || !has(rep, RedisStock) {
		t.Fatalf("report %+v", rep.Findings)
	}
	m, ok := w.resv[id]
	if !ok || m.PayBy == nil || !m.PayBy.Equal(payBy) || w.marks[1] != id {
		t.Fatalf("reservation %+v (%v), mark %q", m, ok, w.marks[1])
	}
	if w.left != 9 {
		t.Fatalf("stock_left %d, want 9", w.left)
	}
}

func has(rep Report, kind string) bool {
	for _, f := range rep.Findings {
		if f.Kind == kind {
			return true
		}
	}
	return false
}
