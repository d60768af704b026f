package reconcile

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// world is one item in memory, MySQL, Redis and Temporal side by side, each
// method one atomic step as in the real stores (a transaction, a script).
// Tests run single-threaded: what the buyers, sagas and doors do meanwhile
// is a hook that runs right after a named step of the reconcile run
// ("mysql read", "redis read"); a fence (a row lock) runs no hook inside.
type world struct {
	// MySQL
	item     store.Item
	row      store.Stock
	orders   map[string]*store.Order
	deds     map[string]*store.StockDeduction
	payments []store.Payment
	refunds  []store.Refund
	// Redis
	left     int64
	resv     map[string]order.Message
	marks    map[int64]string
	released map[string]bool
	// Temporal
	running      map[string]bool
	woken        map[string]bool // sagas sent a pay or cancel
	lostRow      map[string]bool // completed sagas whose order row MySQL lost
	refundStarts map[string]int  // PaymentRefund starts by provider payment id

	listErr   error // Temporal's visibility fails
	after     map[string]func()
	givenBack map[string]int // order id -> Redis units given back for it
	restored  int
}

func newWorld(units int64) *world {
	return &world{item: store.Item{ID: 1, StockTotal: units}, row: store.Stock{ItemID: 1, Stock: units, Version: 1},
		orders: map[string]*store.Order{}, deds: map[string]*store.StockDeduction{}, left: units,
		resv: map[string]order.Message{}, marks: map[int64]string{}, released: map[string]bool{}, running: map[string]bool{}, woken: map[string]bool{},
		lostRow: map[string]bool{}, refundStarts: map[string]int{}, after: map[string]func(){}, givenBack: map[string]int{}}
}

func (w *world) hook(step string) {
	if f := w.after[step]; f != nil {
		delete(w.after, step)
		f()
	}
}

func (w *world) reconciler(grace time.Duration) *Reconciler {
	return New(Deps{MySQL: mysqlSide{w}, Units: redisSide{w}, Outbox: outboxSide{w}, Sagas: sagaSide{w}, Workflows: sagaSide{w}, Refunds: sagaSide{w}},
		grace, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// The pipeline's steps.

// reserve is reserve.lua; the order id carries the time at.
func (w *world) reserve(user int64, at time.Time) string {
	id := ulid.MustNew(ulid.Timestamp(at), rand.Reader).String()
	w.left--
	w.resv[id] = order.Message{OrderID: id, ItemID: w.item.ID, UserID: user, ReservedAt: at}
	w.marks[user] = id
	return id
}

// persistAndDeduct is PersistOrder then DeductStock (one transaction).
func (w *world) persistAndDeduct(id string, payBy time.Time) {
	m := w.resv[id]
	w.orders[id] = &store.Order{OrderID: id, UserID: m.UserID, ItemID: w.item.ID, Status: order.StatusPendingPayment,
		PayBy: &payBy, CreatedAt: m.ReservedAt, UpdatedAt: m.ReservedAt}
	w.running[id] = true
	w.deduct(id)
}

func (w *world) deduct(id string) {
	w.row.Stock--
	w.row.Version++
	w.deds[id] = &store.StockDeduction{OrderID: id, ItemID: w.item.ID}
}

// closeAndRelease is the saga's CloseOrder (one transaction) then ReleaseUnit
// (release.lua), as after a timeout; the saga then completes.
func (w *world) closeAndRelease(id string) {
	o := w.orders[id]
	o.Status, o.Reason = order.StatusCancelled, order.ReasonPaymentTimeout
	if d := w.deds[id]; d != nil && !d.Restored {
		d.Restored = true
		w.row.Stock++
		w.row.Version++
	}
	w.giveBack(id, true)
	delete(w.running, id)
}

// giveBack is release.lua (release) or its retire mode.
func (w *world) giveBack(id string, release bool) bool {
	w.released[id] = true
	if _, ok := w.resv[id]; !ok {
		return false
	}
	delete(w.resv, id)
	if release {
		w.left++
		w.givenBack[id]++
	}
	return true
}

// MySQL (store.Store).
type mysqlSide struct{ *world }

func (w mysqlSide) ReadItemState(context.Context, int64) (store.ItemState, error) {
	st := store.ItemState{Item: w.item, Stock: w.row}
	for _, o := range w.orders {
		st.Orders = append(st.Orders, *o)
	}
	for _, d := range w.deds {
		st.Deductions = append(st.Deductions, *d)
	}
	st.Payments, st.Refunds = w.payments, w.refunds
	w.hook("mysql read")
	return st, nil
}

func (w mysqlSide) ActiveItems(context.Context, time.Time, time.Duration) ([]int64, error) {
	return []int64{w.item.ID}, nil
}

func (w mysqlSide) FindOrder(_ context.Context, id string) (store.Order, error) {
	if o := w.orders[id]; o != nil {
		return *o, nil
	}
	return store.Order{}, order.ErrNotFound
}

func (w mysqlSide) WithHeldOrder(_ context.Context, id string, fn func(store.Order) error) (bool, error) {
	o := w.orders[id]
	if o == nil || !o.Status.Holds() {
		return false, nil
	}
	return true, fn(*o)
}

func (w mysqlSide) FenceStock(_ context.Context, _ int64, seen store.Stock, deducted []string, fn func(store.Stock, []string) error) (bool, error) {
	moved := w.row.Version != seen.Version
	if moved {
		deducted = nil
		for id, d := range w.deds {
			if !d.Restored {
				deducted = append(deducted, id)
			}
		}
	}
	return moved, fn(w.row, deducted)
}

// Redis (stock.Store).
type redisSide struct{ *world }

func (w redisSide) ReadItemState(context.Context, int64) (stock.ItemState, error) {
	st := stock.ItemState{Left: w.left, Reservations: map[string]order.Message{}, Marks: map[int64]string{}, Released: map[string]bool{}}
	for k, v := range w.resv {
		st.Reservations[k] = v
	}
	for k, v := range w.marks {
		st.Marks[k] = v
	}
	for k := range w.released {
		st.Released[k] = true
	}
	w.hook("redis read")
	return st, nil
}

func (w redisSide) Reservation(_ context.Context, _ int64, id string) (order.Message, bool, error) {
	m, ok := w.resv[id]
	return m, ok, nil
}

func (w redisSide) Restore(_ context.Context, m order.Message) (bool, error) {
	if w.released[m.OrderID] {
		return false, nil
	}
	if _, ok := w.marks[m.UserID]; !ok {
		w.marks[m.UserID] = m.OrderID
	}
	if _, ok := w.resv[m.OrderID]; ok {
		return false, nil
	}
	w.resv[m.OrderID] = m
	w.restored++
	return true, nil
}

func (w redisSide) Release(_ context.Context, _ int64, id string) (bool, error) {
	return w.giveBack(id, true), nil
}
func (w redisSide) Retire(_ context.Context, _ int64, id string) (bool, error) {
	return w.giveBack(id, false), nil
}

// Recount is the recount script: stockRow minus the reservations not in deducted.
func (w redisSide) Recount(_ context.Context, _ int64, stockRow int64, deducted []string, mode stock.CountMode) (int64, int64, error) {
	in := map[string]bool{}
	for _, id := range deducted {
		in[id] = true
	}
	want := stockRow
	for id := range w.resv {
		if !in[id] {
			want--
		}
	}
	want = max(want, 0)
	old := w.left
	if mode == stock.Set {
		w.left = want
	}
	return old, want, nil
}

type outboxSide struct{ *world }

func (w outboxSide) OrderIDs(context.Context, int64) (map[string]bool, error) {
	return map[string]bool{}, nil
}

// Temporal.
type sagaSide struct{ *world }

func (w sagaSide) Start(_ context.Context, m order.Message) error {
	w.running[m.OrderID] = true
	return nil
}

// StartRefund is PaymentRefund's start: one workflow per payment (its id).
func (w sagaSide) StartRefund(_ context.Context, _, paymentID, _ string) error {
	w.refundStarts[paymentID]++
	return nil
}

func (w sagaSide) Signal(_ context.Context, id, _ string) error {
	if !w.running[id] {
		return order.ErrNotFound
	}
	w.woken[id] = true
	return nil
}

func (w sagaSide) Woken(_ context.Context, id string) (bool, error) {
	return w.woken[id], nil
}

func (w sagaSide) ListOrderWorkflows(context.Context, int64) ([]snapshot.Workflow, error) {
	if w.listErr != nil {
		return nil, w.listErr
	}
	var out []snapshot.Workflow
	for id := range w.orders {
		st := "Completed"
		if w.running[id] {
			st = "Running"
		}
		out = append(out, snapshot.Workflow{WorkflowID: "order-" + id, OrderID: id, Status: st})
	}
	for id := range w.lostRow {
		out = append(out, snapshot.Workflow{WorkflowID: "order-" + id, OrderID: id, Status: "Completed"})
	}
	for id := range w.running {
		if w.orders[id] == nil {
			out = append(out, snapshot.Workflow{WorkflowID: "order-" + id, OrderID: id, Status: "Running"})
		}
	}
	return out, nil
}
