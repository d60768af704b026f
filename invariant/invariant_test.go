package invariant_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// fakeWorkflows stands in for Temporal's visibility API.
type fakeWorkflows struct {
	mu  sync.Mutex
	wfs map[string]snapshot.Workflow
}

func (f *fakeWorkflows) set(orderID, status string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.wfs[orderID] = snapshot.Workflow{WorkflowID: "order-" + orderID, OrderID: orderID, Status: status}
}

func (f *fakeWorkflows) ListOrderWorkflows(context.Context, int64) ([]snapshot.Workflow, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]snapshot.Workflow, 0, len(f.wfs))
	for _, w := range f.wfs {
		out = append(out, w)
	}
	return out, nil
}

// sale is one item on the real MySQL and Redis, driven by hand through the
// same steps the pipeline takes, so a test can then break one of them.
type sale struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	stock    *stock.Store
	rdb      redis.UniversalClient
	wf       *fakeWorkflows
	item     int64
	accepted []invariant.Accepted
}

func newSale(t *testing.T, units int64) *sale {
	t.Helper()
	st, _ := testkit.MySQL(t)
	rdb, prefix := testkit.Redis(t)
	ctx := context.Background()
	now := time.Now().UTC()
	it, err := st.CreateItem(ctx, store.Item{Name: "invariant test", PriceCents: 100, StockTotal: units,
		StartAt: now.Add(-time.Minute), EndAt: now.Add(time.Hour), PaymentTimeoutSeconds: 5})
	if err != nil {
		t.Fatal(err)
	}
	s := &sale{t: t, ctx: ctx, st: st, stock: stock.New(rdb, prefix), rdb: rdb, item: it.ID,
		wf: &fakeWorkflows{wfs: map[string]snapshot.Workflow{}}}
	if _, err := s.stock.Load(ctx, it.ID, units); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *sale) exec(q string, args ...any) {
	s.t.Helper()
	if err := s.st.DB().WithContext(s.ctx).Exec(q, args...).Error; err != nil {
		s.t.Fatalf("%s: %v", q, err)
	}
}

// buy runs the whole forward path for one buyer: the reservation (real Lua),
// the 202, PersistOrder, DecrementStock, and a workflow waiting for payment.
func (s *sale) buy(user int64) string {
	s.t.Helper()
	m := order.Message{OrderID: order.NewID(), ItemID: s.item, UserID: user, ReservedAt: time.Now().UTC()}
	if _, err := s.stock.Reserve(s.ctx, m); err != nil {
		s.t.Fatalf("reserve for buyer %d: %v", user, err)
	}
	s.accepted = append(s.accepted, invariant.Accepted{OrderID: m.OrderID, UserID: user})
	s.exec("INSERT INTO seckill_order (order_id, user_id, item_id, status) VALUES (?, ?, ?, 'PENDING_PAYMENT')",
		m.OrderID, user, s.item)
	s.exec("INSERT INTO stock_deduction (order_id, item_id) VALUES (?, ?)", m.OrderID, s.item)
	s.exec("UPDATE stock SET stock = stock - 1, version = version + 1 WHERE item_id = ? AND stock > 0", s.item)
	s.wf.set(m.OrderID, "Running")
	return m.OrderID
}

func (s *sale) pay(orderID string) {
	s.t.Helper()
	s.exec("UPDATE seckill_order SET status = 'PAID' WHERE order_id = ?", orderID)
	s.wf.set(orderID, "Completed")
}

// cancel runs the compensation: stock row back, order CANCELLED, Redis
// released — unless releaseRedis is false (the planted leak).
func (s *sale) cancel(orderID string, releaseRedis bool) {
	s.t.Helper()
	s.exec("UPDATE stock_deduction SET restored = TRUE WHERE order_id = ?", orderID)
	s.exec("UPDATE stock SET stock = stock + 1, version = version + 1 WHERE item_id = ?", s.item)
	s.exec("UPDATE seckill_order SET status = 'CANCELLED', reason = 'payment timed out' WHERE order_id = ?", orderID)
	if releaseRedis {
		if _, err := s.stock.Release(s.ctx, s.item, orderID); err != nil {
			s.t.Fatal(err)
		}
	}
	s.wf.set(orderID, "Completed")
}

func (s *sale) check(afterTimeouts, soldOutSeen bool) invariant.Report {
	s.t.Helper()
	rep, err := invariant.Check(s.ctx, invariant.Deps{Store: s.st, Stock: s.stock, Workflows: s.wf}, invariant.Input{
		ItemID: s.item, Accepted: s.accepted, AcceptedComplete: true, SoldOutSeen: soldOutSeen, AfterTimeouts: afterTimeouts,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return rep
}

func wantOnly(t *testing.T, rep invariant.Report, name string, amount int64, alsoAllowed ...string) {
	t.Helper()
	v, ok := rep.Find(name)
	if !ok {
		t.Fatalf("violation %s not caught; report: %+v", name, rep.Violations)
	}
	if v.Amount != amount {
		t.Errorf("%s by %d, want by %d (%s)", name, v.Amount, amount, v.Detail)
	}
	allowed := map[string]bool{name: true}
	for _, a := range alsoAllowed {
		allowed[a] = true
	}
	for _, o := range rep.Violations {
		if !allowed[o.Name] {
			t.Errorf("unexpected violation %s", o)
		}
	}
	t.Logf("caught: %s", v)
}

func TestCleanSaleHasNoViolations(t *testing.T) {
	s := newSale(t, 10)
	var ids []string
	for u := int64(1); u <= 6; u++ {
		ids = append(ids, s.buy(1000+u))
	}
	s.pay(ids[0])
	s.pay(ids[1])
	s.cancel(ids[2], true)

	rep := s.check(false, false)
	if !rep.OK() {
		t.Fatalf("clean sale reported violations: %v", rep.Violations)
	}
	if rep.LiveOrders != 5 || rep.RedisLeft != 5 || rep.StockRow != 5 || !rep.WorkflowsChecked {
		t.Fatalf("figures: %+v", rep)
	}

	// Every unpaid order times out and is compensated: still clean, and every
	// unpaid unit is back.
	for _, id := range ids[3:] {
		s.cancel(id, true)
	}
	rep = s.check(true, false)
	if !rep.OK() {
		t.Fatalf("clean sale after timeouts reported violations: %v", rep.Violations)
	}
	if rep.RedisLeft != 8 || rep.StockRow != 8 {
		t.Fatalf("after timeouts: redis left %d, stock row %d, want 8", rep.RedisLeft, rep.StockRow)
	}
}

// An order whose saga failed (a dependency blinked for too long) is
// compensated cleanly, and still a broken promise: the buyer had a 202.
func TestCatchesFailedOrder(t *testing.T) {
	s := newSale(t, 3)
	id := s.buy(1)
	s.buy(2)
	s.cancel(id, true)
	s.exec("UPDATE seckill_order SET status = 'FAILED', reason = 'RETRIES_EXHAUSTED: Notify' WHERE order_id = ?", id)
	s.wf.set(id, "Failed")
	wantOnly(t, s.check(false, false), invariant.FailedOrder, 1)
}

func TestCatchesPendingAfterTimeout(t *testing.T) {
	s := newSale(t, 3)
	s.buy(1)
	wantOnly(t, s.check(true, false), invariant.PendingAfterTimeout, 1, invariant.LeakedUnit, invariant.WorkflowStuck)
}

// An oversell: the item is sold out, then one more buyer gets a unit anyway
// (a reservation that bypassed the script's stock check drives stock_left to
// -1, and the saga persists the order).
func TestCatchesOversell(t *testing.T) {
	s := newSale(t, 5)
	for u := int64(1); u <= 5; u++ {
		s.buy(u)
	}
	if rep := s.check(false, true); !rep.OK() {
		t.Fatalf("before planting: %v", rep.Violations)
	}
	rdb, k := s.rdb, s.stock.ItemKeys(s.item)
	m := order.Message{OrderID: order.NewID(), ItemID: s.item, UserID: 6, ReservedAt: time.Now().UTC()}
	rdb.Decr(s.ctx, k.Stock)
	rdb.HSet(s.ctx, k.Buyers, "6", m.OrderID)
	rdb.HSet(s.ctx, k.Orders, m.OrderID, m.Encode())
	s.accepted = append(s.accepted, invariant.Accepted{OrderID: m.OrderID, UserID: 6})
	s.exec("INSERT INTO seckill_order (order_id, user_id, item_id, status) VALUES (?, 6, ?, 'PENDING_PAYMENT')", m.OrderID, s.item)
	s.exec("INSERT INTO stock_deduction (order_id, item_id) VALUES (?, ?)", m.OrderID, s.item)
	s.wf.set(m.OrderID, "Running")

	// The stock row cannot go below zero (CHECK constraint), so it also
	// disagrees with the live orders.
	wantOnly(t, s.check(false, true), invariant.Oversell, 1, invariant.StockRow, invariant.UnitsSold)
}

// A duplicate order: seckill_order's UNIQUE (user_id, item_id) makes a second
// row per buyer impossible, so the duplicate that can really happen is
// upstream of it — a buyer answered 202 twice with two order ids, holding two
// reservations in Redis (the one-per-buyer check of the Lua script bypassed).
// The second order then never gets a row of its own.
func TestCatchesDuplicateOrder(t *testing.T) {
	s := newSale(t, 10)
	for u := int64(1); u <= 4; u++ {
		s.buy(u)
	}
	rdb, k := s.rdb, s.stock.ItemKeys(s.item)
	second := order.Message{OrderID: order.NewID(), ItemID: s.item, UserID: 3, ReservedAt: time.Now().UTC()}
	rdb.Decr(s.ctx, k.Stock)
	rdb.HSet(s.ctx, k.Orders, second.OrderID, second.Encode())
	s.accepted = append(s.accepted, invariant.Accepted{OrderID: second.OrderID, UserID: 3})
	s.wf.set(second.OrderID, "Running")

	// The second order also has no row (lost_order), its workflow is not
	// waiting for payment (workflow_stuck) and live orders disagree with the
	// accepted ones (units_sold): all true, all reported.
	wantOnly(t, s.check(false, false), invariant.DuplicateBuyer, 1,
		invariant.LostOrder, invariant.UnitsSold, invariant.WorkflowStuck)
}

// A leaked unit: a payment timeout compensated the stock row and the order,
// but never released the Redis reservation, so nobody can ever buy that unit.
func TestCatchesLeakedUnit(t *testing.T) {
	s := newSale(t, 4)
	a := s.buy(1)
	b := s.buy(2)
	s.pay(a)
	s.cancel(b, false)

	rep := s.check(false, false)
	wantOnly(t, rep, invariant.LeakedUnit, 1)

	rep = s.check(true, false)
	wantOnly(t, rep, invariant.LeakedUnit, 1)
	if rep.RedisLeft != 2 {
		t.Fatalf("redis left %d", rep.RedisLeft)
	}
}

// An order left PAID without a unit: its buyer paid while it was QUEUED, its
// reservation was a phantom (Redis sold a unit MySQL never had), and the row
// became PAID with no deduction and the stock row untouched, where it must
// have ended REFUNDED. The checker names it, by id, as a PAID order without
// a unit; the stock row is off by that unit too.
func TestCatchesPaidWithoutUnit(t *testing.T) {
	s := newSale(t, 3)
	s.pay(s.buy(1))
	m := order.Message{OrderID: order.NewID(), ItemID: s.item, UserID: 2, ReservedAt: time.Now().UTC()}
	if _, err := s.stock.Reserve(s.ctx, m); err != nil {
		t.Fatal(err)
	}
	s.accepted = append(s.accepted, invariant.Accepted{OrderID: m.OrderID, UserID: 2})
	s.exec("INSERT INTO seckill_order (order_id, user_id, item_id, status, paid_at) VALUES (?, 2, ?, 'PAID', NOW(3))", m.OrderID, s.item)
	s.wf.set(m.OrderID, "Completed")

	rep := s.check(false, false)
	wantOnly(t, rep, invariant.StockDeduction, 1, invariant.StockRow)
	if v, _ := rep.Find(invariant.StockDeduction); !strings.Contains(v.Detail, "1 PAID orders without a unit") || !strings.Contains(v.Detail, m.OrderID) {
		t.Fatalf("detail does not name the PAID order %s: %s", m.OrderID, v.Detail)
	}
}

// A workflow that failed without running its compensation: the order row
// still says PENDING_PAYMENT and the unit is still held.
func TestCatchesUncompensatedWorkflow(t *testing.T) {
	s := newSale(t, 4)
	id := s.buy(1)
	s.wf.set(id, "Failed")
	wantOnly(t, s.check(false, false), invariant.WorkflowUncompensated, 1)
}

func TestCatchesLostOrderAndMissingWorkflow(t *testing.T) {
	s := newSale(t, 4)
	s.buy(1)
	// A 202 whose reservation never became an order or a workflow.
	m := order.Message{OrderID: order.NewID(), ItemID: s.item, UserID: 2, ReservedAt: time.Now().UTC()}
	if _, err := s.stock.Reserve(s.ctx, m); err != nil {
		t.Fatal(err)
	}
	s.accepted = append(s.accepted, invariant.Accepted{OrderID: m.OrderID, UserID: 2})
	rep := s.check(false, false)
	wantOnly(t, rep, invariant.LostOrder, 1, invariant.WorkflowMissing, invariant.UnitsSold)
	if !rep.Has(invariant.WorkflowMissing) {
		t.Fatal("missing workflow not caught")
	}
}

// An order whose 202 never reached its buyer (an API instance killed mid
// request) is accepted all the same when the client saw errors: selling out
// is no undersell then. With every answer received, it is a phantom.
func TestUnansweredOrderCountsWhenAnswersWereLost(t *testing.T) {
	s := newSale(t, 3)
	for u := int64(1); u <= 3; u++ {
		s.buy(u)
	}
	s.accepted = s.accepted[:2] // the third buyer's 202 was lost
	in := invariant.Input{ItemID: s.item, Accepted: s.accepted, AcceptedComplete: false, SoldOutSeen: true}
	rep, err := invariant.Check(s.ctx, invariant.Deps{Store: s.st, Stock: s.stock, Workflows: s.wf}, in)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Unanswered != 1 {
		t.Fatalf("lost answer: unanswered %d, violations %v; want 1 and none", rep.Unanswered, rep.Violations)
	}
	in.AcceptedComplete = true
	if rep, err = invariant.Check(s.ctx, invariant.Deps{Store: s.st, Stock: s.stock, Workflows: s.wf}, in); err != nil {
		t.Fatal(err)
	}
	if !rep.Has(invariant.PhantomOrder) || !rep.Has(invariant.Undersell) {
		t.Fatalf("every answer received: want phantom_order and undersell, got %v", rep.Violations)
	}
}

// failingWorkflows is a visibility API that cannot answer.
type failingWorkflows struct{ err error }

func (f failingWorkflows) ListOrderWorkflows(context.Context, int64) ([]snapshot.Workflow, error) {
	return nil, f.err
}

// When only the sagas cannot be listed, the check still judges MySQL and
// Redis (a sale's figures are kept), skips the Temporal checks and names the
// read that failed.
func TestSagasNotListedKeepsTheMySQLAndRedisVerdict(t *testing.T) {
	s := newSale(t, 3)
	s.buy(1)
	s.buy(2)
	s.exec("UPDATE stock SET stock = stock + 1 WHERE item_id = ?", s.item) // a planted stock_row drift
	listErr := errors.New("temporal visibility: list workflows of item 42, page 7 (after 6000 sagas), 4 attempt(s): reset")
	rep, err := invariant.Check(s.ctx, invariant.Deps{Store: s.st, Stock: s.stock, Workflows: failingWorkflows{listErr}},
		invariant.Input{ItemID: s.item, Accepted: s.accepted, AcceptedComplete: true})
	if !errors.Is(err, listErr) {
		t.Fatalf("error %v, want the listing's", err)
	}
	if rep.StockTotal != 3 || rep.LiveOrders != 2 || rep.RedisLeft != 1 || rep.WorkflowsChecked || rep.WorkflowsError != listErr.Error() {
		t.Fatalf("report %+v: want MySQL and Redis judged, the Temporal checks skipped and why", rep)
	}
	wantOnly(t, rep, invariant.StockRow, 1)
}
