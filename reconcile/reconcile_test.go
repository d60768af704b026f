package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

type counter struct{}

func (counter) Inc() {}

// Each kind of drift is planted on the real services; reconcile finds it,
// --repair fixes it, and a second run finds nothing. A clean item reports
// nothing.
func TestReconcileFindsAndRepairsPlantedDrift(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs MySQL, Redis and Temporal (scripts/stack up)")
	}
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	stk := stock.New(rdb, prefix)
	cfg := testkit.Config(t)
	tc, err := temporalx.Dial(ctx, cfg.Temporal, log)
	if err != nil {
		t.Fatalf("Temporal (scripts/stack up): %v", err)
	}
	t.Cleanup(tc.Close)
	tq := testkit.Name(t, "saga")
	w := worker.NewTemporalWorker(tc, tq, cfg.Worker, activities.New(st, orderstatus.New(rdb, prefix), nil), compensation.New(st, stk, counter{}, counter{}))
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	t.Cleanup(func() { testkit.TerminateLeftovers(tc, cfg.Temporal.Namespace, tq) })
	sagas := workflows.NewClient(tc, tq)
	lister := snapshot.TemporalLister{Client: tc, Namespace: cfg.Temporal.Namespace}
	r := reconcile.New(reconcile.Deps{MySQL: st, Units: stk, Outbox: outbox.New(rdb, prefix), Sagas: sagas, Workflows: lister}, 0, log)

	const units = 10
	// Item ids unique across test databases: Temporal's SeckillItemId is global.
	if err := st.DB().Exec(fmt.Sprintf("ALTER TABLE item AUTO_INCREMENT = %d", time.Now().UnixNano()%1_000_000_000_000)).Error; err != nil {
		t.Fatal(err)
	}
	it, err := st.CreateItem(ctx, store.Item{Name: "reconcile", PriceCents: 1, StockTotal: units,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stk.Load(ctx, it.ID, units); err != nil {
		t.Fatal(err)
	}
	reserve := func(user int64) order.Message {
		m := order.Message{OrderID: order.NewID(), ItemID: it.ID, UserID: user, ReservedAt: time.Now().UTC()}
		if _, err := stk.Reserve(ctx, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// A clean order: reserved, its saga PENDING_PAYMENT.
	clean := reserve(1)
	if err := sagas.Start(ctx, clean); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, clean.OrderID, order.StatusPendingPayment)
	rdb.Del(ctx, stk.ItemKeys(it.ID).Outbox) // the relay's job, done
	if rep := run(t, r, it.ID, false); len(rep.Findings) != 0 {
		t.Fatalf("clean item reported %+v", rep.Findings)
	}

	// 1. lost handoff: reserved, its outbox entry gone before any relay saw it.
	lost := reserve(2)
	rdb.Del(ctx, stk.ItemKeys(it.ID).Outbox)
	// 2. a saga running for an order cancelled at the door, never woken.
	running := reserve(3)
	if err := sagas.Start(ctx, running); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, st, running.OrderID, order.StatusPendingPayment)
	rdb.Del(ctx, stk.ItemKeys(it.ID).Outbox)
	if _, _, err := st.RecordCancel(ctx, running.OrderID, running.UserID, time.Now(), false); err != nil {
		t.Fatal(err)
	}
	// ... and past the moment its own timer should have woken it (the
	// timer keeps the hour it was set for).
	if err := st.DB().Exec("UPDATE seckill_order SET pay_by = NOW(3) - INTERVAL 1 MINUTE WHERE order_id = ?", running.OrderID).Error; err != nil {
		t.Fatal(err)
	}
	// 3. a final order whose unit Redis still holds (its saga is gone).
	held := reserve(4)
	rdb.Del(ctx, stk.ItemKeys(it.ID).Outbox)
	if _, err := st.CloseOrder(ctx, store.Order{OrderID: held.OrderID, UserID: 4, ItemID: it.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout}); err != nil {
		t.Fatal(err)
	}
	// 4. a live order whose Redis reservation was lost (Redis failover).
	live := reserve(5)
	rdb.Del(ctx, stk.ItemKeys(it.ID).Outbox)
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: live.OrderID, UserID: 5, ItemID: it.ID}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.DeductStock(ctx, live.OrderID, it.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	rdb.HDel(ctx, stk.ItemKeys(it.ID).Orders, live.OrderID)
	// 5. stock_left bumped by hand.
	rdb.IncrBy(ctx, stk.ItemKeys(it.ID).Stock, 3)

	found := run(t, r, it.ID, false)
	for _, kind := range []string{reconcile.LostHandoff, reconcile.SagaForFinalOrder, reconcile.FinalUnitHeld,
		reconcile.PaidUnitOnSale, reconcile.RedisStock} {
		if !has(found, kind) {
			t.Errorf("drift %s not found; report %+v", kind, found.Findings)
		}
	}
	if found.Remaining() == 0 {
		t.Fatal("nothing remains without --repair")
	}
	if woken, err := sagas.Woken(ctx, running.OrderID); err != nil || woken {
		t.Fatalf("saga never signalled: woken=%v err=%v", woken, err)
	}
	if _, err := sagas.Woken(ctx, order.NewID()); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("Woken of an unknown order: %v, want order.ErrNotFound", err)
	}
	repaired := run(t, r, it.ID, true)
	if n := repaired.Remaining(); n != 0 {
		t.Fatalf("%d findings not repaired: %+v", n, repaired.Findings)
	}
	// The wake is in the saga's history: a later run does not wake it again.
	if woken, err := sagas.Woken(ctx, running.OrderID); err != nil || !woken {
		t.Fatalf("saga after the repair: woken=%v err=%v", woken, err)
	}
	// The repairs land: the lost order gets its saga and row, the running saga
	// closes and gives its unit back (woken, it is no longer drift while it
	// does: wait for the release itself); then nothing is left.
	waitStatus(t, st, lost.OrderID, order.StatusPendingPayment)
	deadline := time.Now().Add(30 * time.Second)
	var again reconcile.Report
	for {
		again = run(t, r, it.ID, false)
		_, held, err := stk.Reservation(ctx, it.ID, running.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Findings) == 0 && !held || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(again.Findings) != 0 {
		t.Fatalf("second run still finds %+v", again.Findings)
	}
	// Units: live = clean, lost, live -> 3 held; stock_left = 7.
	if n, _ := stk.Left(ctx, it.ID); n != units-3 {
		t.Fatalf("stock_left %d, want %d", n, units-3)
	}
}

func run(t *testing.T, r *reconcile.Reconciler, item int64, repair bool) reconcile.Report {
	t.Helper()
	var rep reconcile.Report
	var err error
	for range 5 { // a busy dev server answers visibility queries with transient errors
		if rep, err = r.Run(context.Background(), []int64{item}, repair); err == nil {
			return rep
		}
		time.Sleep(time.Second)
	}
	t.Fatal(err)
	return rep
}

func has(rep reconcile.Report, kind string) bool {
	for _, f := range rep.Findings {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

func waitStatus(t *testing.T, st *store.Store, orderID string, want order.Status) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		o, err := st.FindOrder(context.Background(), orderID)
		if err == nil && o.Status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s: %q %v, want %s", orderID, o.Status, err, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Redis lost the reservation of an order whose saga has persisted it but not
// taken its stock-row unit yet (a backlog), and stock_left with it. The
// repair puts the reservation and the buyer mark back, with the order's
// deadline, before the recount: the unit stays held, not on sale.
func TestReconcilePutsBackQueuedReservation(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: needs MySQL and Redis (scripts/stack up)")
	}
	ctx := context.Background()
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	stk := stock.New(rdb, prefix)
	r := reconcile.New(reconcile.Deps{MySQL: st, Units: stk, Outbox: outbox.New(rdb, prefix)}, 0, testkit.Logger(t))
	const units = 5
	it, err := st.CreateItem(ctx, store.Item{Name: "queued put back", PriceCents: 1, StockTotal: units,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 600})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stk.Load(ctx, it.ID, units); err != nil {
		t.Fatal(err)
	}
	payBy := order.Deadline(time.Now(), 600)
	m := order.Message{OrderID: order.NewID(), ItemID: it.ID, UserID: 7, ReservedAt: time.Now().UTC(), PayBy: &payBy}
	if _, err := stk.Reserve(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: m.OrderID, UserID: m.UserID, ItemID: it.ID, PayBy: m.PayBy}); err != nil {
		t.Fatal(err)
	}
	k := stk.ItemKeys(it.ID)
	// Redis loses the reservation, the mark and the DECR.
	rdb.HDel(ctx, k.Orders, m.OrderID)
	rdb.HDel(ctx, k.Buyers, "7")
	rdb.Incr(ctx, k.Stock)

	rep := run(t, r, it.ID, true)
	if !has(rep, reconcile.PaidUnitOnSale) {
		t.Fatalf("the QUEUED order's lost reservation not found: %+v", rep.Findings)
	}
	got, held, err := stk.Reservation(ctx, it.ID, m.OrderID)
	if err != nil || !held || got.PayBy == nil || !got.PayBy.Equal(payBy) {
		t.Fatalf("reservation after the repair: %+v held=%v %v, want it back with pay_by %s", got, held, err, payBy)
	}
	if id, ok, err := stk.BuyerOrder(ctx, it.ID, 7); err != nil || !ok || id != m.OrderID {
		t.Fatalf("buyer mark after the repair: %q %v %v", id, ok, err)
	}
	if n, _ := stk.Left(ctx, it.ID); n != units-1 {
		t.Fatalf("stock_left %d, want %d (the QUEUED order holds one)", n, units-1)
	}
}
