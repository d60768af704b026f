// Package reconcile finds where Redis, MySQL and Temporal disagree about an
// item's orders and repairs what has one safe answer; every repair re-checks
// its premise atomically as it writes (docs/runbook.md).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// Kinds of drift (docs/runbook.md); the repair follows the colon.
const (
	LostHandoff         = "lost_handoff"                 // reserved, no outbox entry, no saga, no row (or the door's QUEUED one): start the saga
	SagaForFinalOrder   = "saga_running_for_final_order" // running past its own wake for a final row: wake it
	RedisStock          = "redis_stock"                  // stock_left is not the stock row minus undeducted reservations: set it
	StockRow            = "stock_row"                    // the stock row is not S minus unrestored deductions: report
	StuckQueued         = "stuck_queued"                 // QUEUED past the grace, not a lost handoff: report (see its saga)
	PaidUnitOnSale      = "live_order_unit_on_sale"      // a row holding a unit (QUEUED too) without its reservation: put it back
	FinalUnitHeld       = "final_order_unit_held"        // a CANCELLED/FAILED row, reservation held, no saga: release or retire
	RowLost             = "order_row_lost"               // a completed saga without its row (a restore): report
	OpenOrderSagaClosed = "open_order_saga_closed"       // an open row behind its closed saga (a restore): report
)

// Kinds: the stock kinds, then the money kinds (books.Kinds: refund_missing
// and refund_stuck start PaymentRefund, the others are reported).
var Kinds = append([]string{LostHandoff, SagaForFinalOrder, RedisStock, StockRow, StuckQueued, PaidUnitOnSale, FinalUnitHeld,
	RowLost, OpenOrderSagaClosed}, books.Kinds...)

type Finding struct {
	Kind      string `json:"kind"`
	ItemID    int64  `json:"item_id"`
	OrderID   string `json:"order_id,omitempty"`
	PaymentID string `json:"payment_id,omitempty"` // the provider's (money kinds)
	Detail    string `json:"detail"`
	Repaired  bool   `json:"repaired"`
	Action    string `json:"action,omitempty"` // what the repair did, or why there is none
}

type Report struct {
	At       time.Time `json:"at"`
	Items    []int64   `json:"items"`
	Repair   bool      `json:"repair"`
	Findings []Finding `json:"findings"`
	// Books: each item's money (books.Judge on its snapshot).
	Books []books.Sale `json:"books"`
	// Unchecked: items whose sagas could not be listed, their rules skipped.
	Unchecked []Unchecked `json:"unchecked,omitempty"`
}

type Unchecked struct {
	ItemID int64  `json:"item_id"`
	Reason string `json:"reason"`
}

func (r Report) Remaining() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Repaired {
			n++
		}
	}
	return n
}

// MySQL is store.Store: the snapshot, and the locks the repairs re-check under.
type MySQL interface {
	snapshot.MySQL
	ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error)
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	WithHeldOrder(ctx context.Context, orderID string, fn func(store.Order) error) (bool, error)
	FenceStock(ctx context.Context, itemID int64, seen store.Stock, deducted []string,
		fn func(row store.Stock, deducted []string) error) (bool, error)
}

// Units is stock.Store.
type Units interface {
	snapshot.Redis
	Reservation(ctx context.Context, itemID int64, orderID string) (order.Message, bool, error)
	Restore(ctx context.Context, m order.Message) (bool, error)
	Release(ctx context.Context, itemID int64, orderID string) (bool, error)
	Retire(ctx context.Context, itemID int64, orderID string) (bool, error)
	Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (old, want int64, err error)
}

// Sagas is workflows.Client.
type Sagas interface {
	Start(ctx context.Context, m order.Message) error
	Signal(ctx context.Context, orderID, name string) error
	Woken(ctx context.Context, orderID string) (bool, error)
}

// Refunds starts a payment's PaymentRefund (workflows.Client): one per
// payment (its workflow id), refunding only what is owed when it runs.
type Refunds interface {
	StartRefund(ctx context.Context, orderID, paymentID, reason string) error
}

// Deps: Sagas and Workflows may be nil (the saga checks are then skipped),
// Refunds too (money drift is then reported, not repaired).
type Deps struct {
	MySQL     MySQL
	Units     Units
	Outbox    snapshot.Outbox
	Sagas     Sagas
	Workflows snapshot.WorkflowLister
	Refunds   Refunds
	// RequirePayments: every paid order must have a provider payment (books.Options).
	RequirePayments bool
	// Ledger: the provider whose own books each item's are held against
	// (its Recorder nil: our copies only).
	Ledger books.Ledger
}

type Reconciler struct {
	d     Deps
	grace time.Duration
	log   *slog.Logger
}

// New returns a reconciler; grace is how old an order must be before its
// missing pieces count as drift.
func New(d Deps, grace time.Duration, log *slog.Logger) *Reconciler {
	return &Reconciler{d: d, grace: grace, log: log.With("component", "reconcile")}
}

func (r *Reconciler) ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error) {
	return r.d.MySQL.ActiveItems(ctx, now, since)
}

func (r *Reconciler) Run(ctx context.Context, items []int64, repair bool) (Report, error) {
	rep := Report{At: time.Now().UTC(), Items: items, Repair: repair, Findings: []Finding{}, Books: []books.Sale{}}
	for _, id := range items {
		fs, b, unread, err := r.item(ctx, id, repair)
		if err != nil {
			return rep, err
		}
		rep.Findings = append(rep.Findings, fs...)
		rep.Books = append(rep.Books, b)
		if unread != nil {
			rep.Unchecked = append(rep.Unchecked, Unchecked{ItemID: id, Reason: "sagas not listed, their checks skipped: " + unread.Error()})
		}
	}
	return rep, nil
}

// A rule nominates findings; confirm re-checks one's premise as it acts
// (repairing when repair is set), false when the premise is gone.
type rule struct {
	find    func(it *snapshot.Item, grace time.Duration) []Finding
	confirm func(r *Reconciler, ctx context.Context, it *snapshot.Item, f *Finding, repair bool) (bool, error)
}

// rules run in this order; the stock_left recount after them counts what
// their repairs put back.
var rules = []rule{
	{heldOrdersWithoutReservation, (*Reconciler).putBack},
	{finalOrdersHoldingUnits, (*Reconciler).giveBack},
	{lostHandoffs, (*Reconciler).startSaga},
	{sagasOfFinalOrders, (*Reconciler).wakeSaga},
	{stuckQueued, nil},
	{stockRowOffDeductions, nil},
	{rowsBehindSagas, (*Reconciler).stillBehind},
}

// item runs the rules on one item; unread is why its sagas could not be listed.
func (r *Reconciler) item(ctx context.Context, itemID int64, repair bool) (_ []Finding, _ books.Sale, unread error, _ error) {
	src := snapshot.Sources{MySQL: r.d.MySQL, Redis: r.d.Units, Outbox: r.d.Outbox, Workflows: r.d.Workflows}
	it, err := snapshot.Load(ctx, src, itemID)
	if err != nil {
		return nil, books.Sale{}, nil, fmt.Errorf("reconcile item %d: %w", itemID, err)
	}
	if it.WorkflowsErr != nil {
		r.log.Warn("sagas not listed: their checks skipped this run", "item_id", itemID, "err", it.WorkflowsErr)
	}
	var out []Finding
	for _, rl := range rules {
		for _, f := range rl.find(it, r.grace) {
			f.ItemID = itemID
			if rl.confirm != nil {
				ok, err := rl.confirm(r, ctx, it, &f, repair)
				if err != nil {
					return nil, books.Sale{}, nil, err
				}
				if !ok {
					r.log.Info("not drift: the premise was gone when re-checked", "kind", f.Kind, "item_id", itemID, "order_id", f.OrderID)
					continue
				}
			}
			out = append(out, r.logged(f))
		}
	}
	f, err := r.recount(ctx, it, repair)
	if err != nil {
		return nil, books.Sale{}, nil, err
	}
	if f != nil {
		out = append(out, r.logged(*f))
	}
	b, fs, err := r.books(ctx, it, repair)
	if err != nil {
		return nil, books.Sale{}, nil, err
	}
	out = append(out, fs...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, b, it.WorkflowsErr, nil
}

// books keeps the item's books; a refund missing or stuck past the grace
// gets its PaymentRefund, which refunds only what is still owed when it runs
// (its own premise check). Nothing here marks an order PAID.
func (r *Reconciler) books(ctx context.Context, it *snapshot.Item, repair bool) (books.Sale, []Finding, error) {
	recs, err := r.d.Ledger.Read(ctx, it)
	if err != nil {
		// The rest of the books stand; the findings say what was not compared.
		r.log.Warn("the provider's records not read: the books compare our copies only", "item_id", it.ID, "err", err)
	}
	b := books.Judge(it, books.Options{RequirePayments: r.d.RequirePayments, Grace: r.grace, Records: recs})
	out := make([]Finding, 0, len(b.Problems))
	for _, p := range b.Problems {
		f := Finding{Kind: p.Kind, ItemID: it.ID, OrderID: p.OrderID, PaymentID: p.PaymentID, Detail: p.Detail,
			Action: "report only: ask an engineer (docs/runbook.md)"}
		if p.Kind == books.RefundMissing || p.Kind == books.RefundStuck {
			id := workflows.RefundWorkflowID(p.PaymentID)
			switch {
			case !repair:
				f.Action = "--repair starts PaymentRefund " + id
			case r.d.Refunds == nil:
				f.Action = "report only: no refund starter here (SECKILL_PAYMENT_PROVIDER=door?)"
			default:
				if err := r.d.Refunds.StartRefund(ctx, p.OrderID, p.PaymentID, "reconcile: "+p.Kind); err != nil {
					return b, nil, err
				}
				f.Repaired, f.Action = true, "PaymentRefund "+id+" started (or started before)"
			}
		}
		out = append(out, r.logged(f))
	}
	return b, out, nil
}

func (r *Reconciler) logged(f Finding) Finding {
	if f.Repaired {
		r.log.Warn("drift repaired", "kind", f.Kind, "item_id", f.ItemID, "order_id", f.OrderID, "action", f.Action)
	} else {
		r.log.Warn("drift found", "kind", f.Kind, "item_id", f.ItemID, "order_id", f.OrderID, "detail", f.Detail)
	}
	return f
}

// heldOrdersWithoutReservation: a row that holds a unit keeps its reservation
// until a close releases it.
func heldOrdersWithoutReservation(it *snapshot.Item, grace time.Duration) []Finding {
	var out []Finding
	for _, o := range it.MySQL.Orders {
		if _, held := it.Redis.Reservations[o.OrderID]; held || !o.Status.Holds() || it.Age(o.OrderID, o.CreatedAt) <= grace {
			continue
		}
		out = append(out, Finding{Kind: PaidUnitOnSale, OrderID: o.OrderID, Detail: fmt.Sprintf("%s in MySQL, no Redis reservation", o.Status)})
	}
	return out
}

// putBack reads the reservation, then the row: a release needs a close first.
func (r *Reconciler) putBack(ctx context.Context, it *snapshot.Item, f *Finding, repair bool) (bool, error) {
	if !repair {
		if _, held, err := r.d.Units.Reservation(ctx, it.ID, f.OrderID); err != nil || held {
			return false, err
		}
		row, err := r.d.MySQL.FindOrder(ctx, f.OrderID)
		if err != nil {
			return false, err
		}
		return row.Status.Holds() && !it.Redis.Released[f.OrderID], nil
	}
	var restored bool
	held, err := r.d.MySQL.WithHeldOrder(ctx, f.OrderID, func(row store.Order) error {
		var err error
		restored, err = r.d.Units.Restore(ctx, row.Reservation())
		return err
	})
	if err != nil || !held {
		return false, err
	}
	if !restored {
		// Held after all, or refused: its unit was released once and is on
		// sale again; putting it back would sell it twice.
		_, held, err := r.d.Units.Reservation(ctx, it.ID, f.OrderID)
		if err != nil || held {
			return false, err
		}
		f.Action = "not put back: its unit was released before (the order holds one again?); ask an engineer"
		return true, nil
	}
	f.Repaired, f.Action = true, "reservation and buyer mark put back (order row locked, holding its unit)"
	return true, nil
}

func finalOrdersHoldingUnits(it *snapshot.Item, grace time.Duration) []Finding {
	var out []Finding
	for id := range it.Redis.Reservations {
		o, ok := it.Orders[id]
		if !ok || !snapshot.Released(o.Status) || it.Age(id, o.CreatedAt) <= grace {
			continue
		}
		if w, ok := it.Sagas[id]; ok && w.Running() || !it.WorkflowsRead {
			continue
		}
		out = append(out, Finding{Kind: FinalUnitHeld, OrderID: id, Detail: fmt.Sprintf("%s (%s) but its Redis reservation is held", o.Status, o.Reason)})
	}
	return out
}

// giveBack: a final row stays final, so only Redis's premise is re-checked.
func (r *Reconciler) giveBack(ctx context.Context, it *snapshot.Item, f *Finding, repair bool) (bool, error) {
	o := it.Orders[f.OrderID]
	if !repair {
		_, held, err := r.d.Units.Reservation(ctx, it.ID, o.OrderID)
		return held, err
	}
	giveBack := r.d.Units.Release
	f.Action = "unit released"
	if strings.HasPrefix(o.Reason, order.ReasonStockExhausted) {
		giveBack, f.Action = r.d.Units.Retire, "reservation retired (the stock row never had the unit)"
	}
	if done, err := giveBack(ctx, it.ID, o.OrderID); err != nil || !done {
		return false, err
	}
	f.Repaired = true
	return true, nil
}

// lostHandoffs: a reservation whose message no saga will get (a QUEUED row
// the door wrote counts as no row).
func lostHandoffs(it *snapshot.Item, grace time.Duration) []Finding {
	var out []Finding
	for id, m := range it.Redis.Reservations {
		if !handoffLost(it, id, m, grace) {
			continue
		}
		detail := "reserved in Redis; no outbox entry, no order row, no saga"
		if _, row := it.Orders[id]; row {
			detail = "reserved in Redis, QUEUED in MySQL (written at the door); no outbox entry, no saga"
		}
		out = append(out, Finding{Kind: LostHandoff, OrderID: id, Detail: detail})
	}
	return out
}

func handoffLost(it *snapshot.Item, id string, m order.Message, grace time.Duration) bool {
	if !it.WorkflowsRead || it.Outbox == nil {
		return false
	}
	o, row := it.Orders[id]
	_, saga := it.Sagas[id]
	return (!row || o.Status == order.StatusQueued) && !saga && !it.Outbox[id] && it.Age(id, m.ReservedAt) > grace
}

// startSaga: starting a saga that exists is a no-op.
func (r *Reconciler) startSaga(ctx context.Context, it *snapshot.Item, f *Finding, repair bool) (bool, error) {
	if !repair || r.d.Sagas == nil {
		return true, nil
	}
	m, held, err := r.d.Units.Reservation(ctx, it.ID, f.OrderID)
	if err != nil || !held {
		return false, err // released meanwhile: its saga ran after all
	}
	if err := r.d.Sagas.Start(ctx, m); err != nil {
		return false, err
	}
	f.Repaired, f.Action = true, "saga started from the reservation"
	return true, nil
}

// sagasOfFinalOrders: before WakesBy plus the grace, the wake may be on its way.
func sagasOfFinalOrders(it *snapshot.Item, grace time.Duration) []Finding {
	if !it.WorkflowsRead {
		return nil
	}
	var out []Finding
	for _, w := range it.Workflows {
		o, ok := it.Orders[w.OrderID]
		if !w.Running() || !ok || !o.Status.Final() || !it.At.After(snapshot.WakesBy(o).Add(grace)) {
			continue
		}
		out = append(out, Finding{Kind: SagaForFinalOrder, OrderID: w.OrderID,
			Detail: fmt.Sprintf("saga running, order %s since before %s", o.Status, snapshot.WakesBy(o).UTC().Format(time.RFC3339))})
	}
	return out
}

// wakeSaga: a woken saga follows the row; one already woken is left alone.
func (r *Reconciler) wakeSaga(ctx context.Context, it *snapshot.Item, f *Finding, repair bool) (bool, error) {
	if r.d.Sagas == nil {
		return true, nil
	}
	woken, err := r.d.Sagas.Woken(ctx, f.OrderID)
	if errors.Is(err, order.ErrNotFound) || err == nil && woken {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !repair {
		return true, nil
	}
	signal := workflows.SignalCancel
	if it.Orders[f.OrderID].Status == order.StatusPaid {
		signal = workflows.SignalPay
	}
	err = r.d.Sagas.Signal(ctx, f.OrderID, signal)
	if errors.Is(err, order.ErrNotFound) {
		return false, nil // it closed meanwhile
	}
	if err != nil {
		return false, err
	}
	f.Repaired, f.Action = true, "saga woken with "+signal
	return true, nil
}

// stuckQueued counts the grace from the row's creation.
func stuckQueued(it *snapshot.Item, grace time.Duration) []Finding {
	var out []Finding
	for _, o := range it.MySQL.Orders {
		if o.Status != order.StatusQueued || it.At.Sub(o.CreatedAt) <= grace {
			continue
		}
		if m, held := it.Redis.Reservations[o.OrderID]; held && handoffLost(it, o.OrderID, m, grace) {
			continue
		}
		out = append(out, Finding{Kind: StuckQueued, OrderID: o.OrderID, Detail: "QUEUED in MySQL past the grace period; see its saga"})
	}
	return out
}

// rowsBehindSagas: a closed saga whose row is missing or open, which only a
// row MySQL lost (a restore) looks like: a saga writes it final first.
func rowsBehindSagas(it *snapshot.Item, _ time.Duration) []Finding {
	var out []Finding
	for _, w := range it.Workflows {
		o, row := it.Orders[w.OrderID]
		switch {
		case w.Running():
		case !row && w.Status == "Completed": // sagas that fail without a row (DUPLICATE_ORDER) are Failed
			out = append(out, Finding{Kind: RowLost, OrderID: w.OrderID, Detail: "saga completed, no order row"})
		case row && !o.Status.Final():
			out = append(out, Finding{Kind: OpenOrderSagaClosed, OrderID: w.OrderID,
				Detail: fmt.Sprintf("%s in MySQL, saga %s", o.Status, w.Status)})
		}
	}
	return out
}

// stillBehind re-reads the row (the MySQL read came before the sagas').
func (r *Reconciler) stillBehind(ctx context.Context, _ *snapshot.Item, f *Finding, _ bool) (bool, error) {
	row, err := r.d.MySQL.FindOrder(ctx, f.OrderID)
	missing := errors.Is(err, order.ErrNotFound)
	if err != nil && !missing {
		return false, err
	}
	if f.Kind == RowLost && !missing || f.Kind == OpenOrderSagaClosed && (missing || row.Status.Final()) {
		return false, nil // written meanwhile
	}
	f.Action = "report only: MySQL lost it (a restore?); `temporal workflow result -w order-" + f.OrderID + "` says how it ended"
	return true, nil
}

func stockRowOffDeductions(it *snapshot.Item, _ time.Duration) []Finding {
	total, row, unrestored := it.MySQL.Item.StockTotal, it.MySQL.Stock.Stock, int64(len(it.MySQL.Unrestored()))
	if row == total-unrestored {
		return nil
	}
	return []Finding{{Kind: StockRow, Detail: fmt.Sprintf("stock row %d, want S %d - unrestored deductions %d = %d",
		row, total, unrestored, total-unrestored), Action: "report only: MySQL is the ground truth; ask an engineer"}}
}

// recount compares stock_left with what Recount wants, under store.FenceStock.
func (r *Reconciler) recount(ctx context.Context, it *snapshot.Item, repair bool) (*Finding, error) {
	var oldLeft, want, row int64
	mode := stock.Check
	if repair {
		mode = stock.Set
	}
	moved, err := r.d.MySQL.FenceStock(ctx, it.ID, it.MySQL.Stock, it.MySQL.Unrestored(), func(st store.Stock, deducted []string) error {
		row = st.Stock
		var err error
		oldLeft, want, err = r.d.Units.Recount(ctx, it.ID, st.Stock, deducted, mode)
		return err
	})
	if err != nil {
		return nil, err
	}
	if moved {
		r.log.Debug("stock row moved since the snapshot; recounted under the lock", "item_id", it.ID)
	}
	if oldLeft == want {
		return nil, nil
	}
	f := &Finding{Kind: RedisStock, ItemID: it.ID,
		Detail: fmt.Sprintf("stock_left %d, want %d (the stock row %d minus the reservations not deducted yet)", oldLeft, want, row)}
	if repair {
		f.Repaired, f.Action = true, fmt.Sprintf("stock_left set to %d (stock row locked)", want)
	}
	return f, nil
}
