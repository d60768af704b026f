package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

const grace = 5 * time.Second

func run(t *testing.T, w *world, repair bool) Report {
	t.Helper()
	rep, err := w.reconciler(grace).Run(context.Background(), []int64{w.item.ID}, repair)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// redisConsistent: stock_left and the reservations account for every unit
// the stock row does not hold for a deducted order.
func (w *world) checkUnits(t *testing.T) {
	t.Helper()
	live := int64(0)
	for _, o := range w.orders {
		if o.Status == order.StatusPendingPayment || o.Status == order.StatusPaid {
			live++
		}
	}
	if w.row.Stock+live != w.item.StockTotal {
		t.Errorf("stock row %d + live %d != %d", w.row.Stock, live, w.item.StockTotal)
	}
	if w.left+int64(len(w.resv)) != w.item.StockTotal {
		t.Errorf("stock_left %d + reservations %d != %d", w.left, len(w.resv), w.item.StockTotal)
	}
	for id, n := range w.givenBack {
		if n > 1 {
			t.Errorf("order %s given back %d times", id, n)
		}
	}
}

// A timeout's close and ReleaseUnit land between the snapshot's MySQL read
// (the order live) and its Redis read (no reservation). The old reconciler
// put the released reservation back, and a later run released the unit a
// second time. Now the restore re-checks the row under its lock (and the
// script refuses a released order): nothing is put back, nothing given back
// twice, and it is not reported as drift.
func TestCloseAndReleaseBetweenOrderReadAndReservationRead(t *testing.T) {
	w := newWorld(10)
	long := time.Now().Add(-time.Minute)
	x := w.reserve(1, long)
	w.persistAndDeduct(x, time.Now().Add(-20*time.Second))
	y := w.reserve(2, long)
	w.persistAndDeduct(y, time.Now().Add(time.Hour))
	w.after["mysql read"] = func() { w.closeAndRelease(x) }

	rep := run(t, w, true)
	if len(rep.Findings) != 0 {
		t.Errorf("findings %+v, want none (the release was the pipeline, not drift)", rep.Findings)
	}
	if _, ok := w.resv[x]; ok || w.restored != 0 {
		t.Fatalf("the released reservation of %s was put back (%d restores)", x, w.restored)
	}
	for range 3 {
		if rep := run(t, w, true); len(rep.Findings) != 0 {
			t.Errorf("later run: %+v", rep.Findings)
		}
	}
	w.checkUnits(t)
}

// The same interleaving, but the restore script is the last guard: even a
// row lock that (wrongly) saw the order live cannot resurrect a released
// unit.
func TestRestoreRefusesAReleasedOrder(t *testing.T) {
	w := newWorld(10)
	x := w.reserve(1, time.Now().Add(-time.Minute))
	w.persistAndDeduct(x, time.Now().Add(time.Hour))
	m := w.resv[x]
	w.giveBack(x, true) // released in Redis; the row still says live
	if ok, _ := (redisSide{w}).Restore(context.Background(), m); ok {
		t.Fatal("restore of a released order succeeded")
	}
	rep := run(t, w, true)
	if _, ok := w.resv[x]; ok {
		t.Fatal("reservation put back")
	}
	if len(rep.Findings) == 0 || rep.Remaining() == 0 {
		t.Fatalf("a live order whose unit was released must stay reported, unrepaired: %+v", rep.Findings)
	}
}

// A deduction, a close and a release commit after the snapshot's MySQL read
// and before the recount: the recount is fenced (the stock row locked, the
// deductions re-read because its version moved), so stock_left is neither
// lowered nor raised by a stale picture.
func TestRecountFencedAgainstWritesAfterTheSnapshot(t *testing.T) {
	w := newWorld(10)
	long := time.Now().Add(-time.Minute)
	var ids []string
	for u := range int64(3) {
		ids = append(ids, w.reserve(u+1, long))
	}
	ids = append(ids, w.reserve(4, time.Now())) // its saga has not started yet
	w.persistAndDeduct(ids[0], time.Now().Add(time.Hour))
	w.persistAndDeduct(ids[1], time.Now().Add(time.Hour))
	w.after["mysql read"] = func() {
		w.persistAndDeduct(ids[2], time.Now().Add(time.Hour)) // DeductStock commits
		w.closeAndRelease(ids[1])                             // a timeout gives a unit back
	}
	left := w.left + 1 // ids[1]'s unit back
	rep := run(t, w, true)
	for _, f := range rep.Findings {
		t.Errorf("finding %+v", f)
	}
	if w.left != left {
		t.Fatalf("stock_left %d, want %d", w.left, left)
	}
	w.checkUnits(t)
}

// Orders paid or cancelled at the door whose sagas wait for a wake still
// queued at an API: not drift until the saga's own timer (pay_by + grace)
// should have fired, plus the reconciler's grace.
func TestQueuedWakeIsNotDrift(t *testing.T) {
	w := newWorld(10)
	x := w.reserve(1, time.Now().Add(-time.Minute))
	w.persistAndDeduct(x, time.Now().Add(-order.PayGrace+time.Second))
	w.orders[x].Status = order.StatusPaid
	if rep := run(t, w, false); len(rep.Findings) != 0 {
		t.Fatalf("queued wake reported: %+v", rep.Findings)
	}
	past := time.Now().Add(-order.PayGrace - grace - time.Second)
	w.orders[x].PayBy = &past
	rep := run(t, w, true)
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != SagaForFinalOrder || !rep.Findings[0].Repaired {
		t.Fatalf("findings %+v, want the saga woken", rep.Findings)
	}
	// Still running on the next run (a loaded Temporal): it holds its
	// wake, so it is catching up, not drift, and is not woken again.
	if rep := run(t, w, true); len(rep.Findings) != 0 {
		t.Fatalf("findings %+v after the wake, want none", rep.Findings)
	}
}

// Younger than the grace, a live order without its reservation is left
// alone; older, its reservation is put back once.
func TestGraceAndOneRestore(t *testing.T) {
	w := newWorld(10)
	young := w.reserve(1, time.Now())
	w.persistAndDeduct(young, time.Now().Add(time.Hour))
	old := w.reserve(2, time.Now().Add(-time.Minute))
	w.persistAndDeduct(old, time.Now().Add(time.Hour))
	delete(w.resv, young) // Redis lost both reservations (and kept the DECRs)
	delete(w.resv, old)
	rep := run(t, w, true)
	var restored []string
	for _, f := range rep.Findings {
		if f.Kind == PaidUnitOnSale && f.Repaired {
			restored = append(restored, f.OrderID)
		}
	}
	if len(restored) != 1 || restored[0] != old {
		t.Fatalf("restored %v, want only %s; findings %+v", restored, old, rep.Findings)
	}
	if _, ok := w.resv[young]; ok {
		t.Fatal("young order touched")
	}
	w.closeAndRelease(old)
	run(t, w, true)
	if w.givenBack[old] != 1 {
		t.Fatalf("%s given back %d times", old, w.givenBack[old])
	}
}

// Temporal's visibility does not answer: the MySQL and Redis repairs still
// run; what needs the sagas (a held unit of a final order) waits.
func TestRepairsWithoutTemporal(t *testing.T) {
	w := newWorld(10)
	long := time.Now().Add(-time.Minute)
	lost := w.reserve(1, long)
	w.persistAndDeduct(lost, time.Now().Add(time.Hour))
	delete(w.resv, lost)
	held := w.reserve(2, long)
	w.persistAndDeduct(held, time.Now().Add(-time.Minute))
	w.orders[held].Status = order.StatusCancelled
	w.deds[held].Restored = true
	w.row.Stock++
	delete(w.running, held)
	w.listErr = errors.New("visibility timed out")
	rep := run(t, w, true)
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != PaidUnitOnSale || !rep.Findings[0].Repaired {
		t.Fatalf("findings %+v, want only the reservation put back", rep.Findings)
	}
	// The report says which checks did not run: no finding there is not "no drift".
	if len(rep.Unchecked) != 1 || rep.Unchecked[0].ItemID != 1 || !strings.Contains(rep.Unchecked[0].Reason, "visibility timed out") {
		t.Fatalf("unchecked %+v, want item 1's sagas named as not listed", rep.Unchecked)
	}
	w.listErr = nil
	rep = run(t, w, true)
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != FinalUnitHeld || !rep.Findings[0].Repaired {
		t.Fatalf("findings %+v, want the held unit released once Temporal answers", rep.Findings)
	}
	if len(rep.Unchecked) != 0 {
		t.Fatalf("unchecked %+v once Temporal answers", rep.Unchecked)
	}
	w.checkUnits(t)
}

// A payment that took money for an order closed without its unit, never
// refunded: reconcile reports it past the grace, --repair starts its
// PaymentRefund (once per run, one workflow id) and touches no order row;
// a PAID order without its payment is reported, never repaired.
func TestMissingRefundStartsPaymentRefund(t *testing.T) {
	w := newWorld(10)
	w.item.PriceCents, w.item.Currency = 999, "EUR"
	long := time.Now().Add(-time.Hour)
	closed := w.reserve(1, long)
	w.persistAndDeduct(closed, long.Add(time.Minute))
	w.closeAndRelease(closed)
	late := long.Add(2 * time.Minute) // after pay_by: owed back (one in time would be paid_in_time_not_paid too)
	w.payments = append(w.payments, store.Payment{ID: 1, OrderID: closed, UserID: 1, ItemID: 1, ProviderPaymentID: "pi_1",
		Amount: 999, Currency: "EUR", Status: store.PaymentSucceeded, SucceededAt: &late, PayBy: long.Add(time.Minute), UpdatedAt: long})
	before := *w.orders[closed]

	rep := run(t, w, false)
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != books.RefundMissing || rep.Findings[0].Repaired || len(w.refundStarts) != 0 {
		t.Fatalf("findings %+v, starts %v: want refund_missing reported, nothing started without --repair", rep.Findings, w.refundStarts)
	}
	if len(rep.Books) != 1 || rep.Books[0].Stuck != 1 || rep.Books[0].Money[0] != (store.Money{Currency: "EUR", Captured: 999, RefundsPending: 999}) {
		t.Fatalf("books %+v, want 9.99 captured and owed back, one stuck", rep.Books)
	}
	rep = run(t, w, true)
	if f := rep.Findings; len(f) != 1 || !f[0].Repaired || f[0].PaymentID != "pi_1" || w.refundStarts["pi_1"] != 1 {
		t.Fatalf("findings %+v, starts %v: want PaymentRefund of pi_1 started once", f, w.refundStarts)
	}
	if *w.orders[closed] != before {
		t.Fatalf("order row changed by the repair: %+v", *w.orders[closed])
	}

	// The refund confirmed: clean.
	w.refunds = append(w.refunds, store.Refund{ID: 1, OrderID: closed, PaymentID: 1, ProviderPaymentID: "pi_1", Amount: 999,
		Currency: "EUR", Status: store.RefundSucceeded, CreatedAt: time.Now()})
	w.orders[closed].Status = order.StatusRefunded
	if rep = run(t, w, true); len(rep.Findings) != 0 || w.refundStarts["pi_1"] != 1 {
		t.Fatalf("findings %+v after the refund, starts %v", rep.Findings, w.refundStarts)
	}

	// A PAID order without a payment under a provider: reported, never
	// marked anything (no payment was looked up, nothing to refund).
	paid := w.reserve(2, long)
	w.persistAndDeduct(paid, time.Now().Add(time.Hour))
	w.orders[paid].Status = order.StatusPaid
	r := w.reconciler(grace)
	r.d.RequirePayments = true
	rep, err := r.Run(context.Background(), []int64{w.item.ID}, true)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, f := range rep.Findings {
		kinds[f.Kind] = true
		if f.Repaired {
			t.Errorf("repaired %+v", f)
		}
	}
	if !kinds[books.PaidWithoutPayment] || w.orders[paid].Status != order.StatusPaid || len(w.refundStarts) != 1 {
		t.Fatalf("findings %+v, starts %v", rep.Findings, w.refundStarts)
	}
}
