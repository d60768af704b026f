// Package reconcile finds where Redis, MySQL and Temporal disagree about an
// item's orders, and repairs what has one safe answer. MySQL is the ground
// truth for units sold; a Redis reservation is the buyer's claim on a unit;
// a saga follows the order row. Every repair is idempotent and logged with
// the order id; what has no safe answer is only reported.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"gorm.io/gorm"

	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/workflows"
)

// Kinds of drift.
const (
	// LostHandoff: a live Redis reservation with no order row, no outbox
	// entry and no saga, older than the grace period. Repair: start its saga.
	LostHandoff = "lost_handoff"
	// SagaForFinalOrder: a saga still running for an order whose row is
	// final. Repair: wake it (it follows the row).
	SagaForFinalOrder = "saga_running_for_final_order"
	// RedisStock: Redis stock_left is not what MySQL leaves on sale: the
	// stock row minus the reservations not deducted yet. Repair: set it.
	RedisStock = "redis_stock"
	// StockRow: the MySQL stock row is not S minus the unrestored
	// deductions. Reported only: MySQL's own record needs an engineer.
	StockRow = "stock_row"
	// StuckQueued: an order still QUEUED (a row, or a reservation whose saga
	// runs) after the grace period. Reported: look at its saga.
	StuckQueued = "stuck_queued"
	// PaidUnitOnSale: a live order (PENDING_PAYMENT or PAID in MySQL) whose
	// Redis reservation is gone, so its unit could be sold again. Repair:
	// put the reservation and the buyer mark back (stock_left follows).
	PaidUnitOnSale = "live_order_unit_on_sale"
	// FinalUnitHeld: a CANCELLED or FAILED order whose Redis reservation is
	// still held and whose saga is not running. Repair: release the unit
	// (retire it when the order failed STOCK_EXHAUSTED).
	FinalUnitHeld = "final_order_unit_held"
)

// Kinds lists every kind of drift.
var Kinds = []string{LostHandoff, SagaForFinalOrder, RedisStock, StockRow, StuckQueued, PaidUnitOnSale, FinalUnitHeld}

// Finding is one difference.
type Finding struct {
	Kind     string `json:"kind"`
	ItemID   int64  `json:"item_id"`
	OrderID  string `json:"order_id,omitempty"`
	Detail   string `json:"detail"`
	Repaired bool   `json:"repaired"`
	Action   string `json:"action,omitempty"` // what the repair did, or why there is none
}

// Report is the result of one run.
type Report struct {
	At       time.Time `json:"at"`
	Items    []int64   `json:"items"`
	Repair   bool      `json:"repair"`
	Findings []Finding `json:"findings"`
}

// Remaining counts the findings that are still drift after this run.
func (r Report) Remaining() int {
	n := 0
	for _, f := range r.Findings {
		if !f.Repaired {
			n++
		}
	}
	return n
}

// Sagas starts and wakes order sagas (workflows.Client).
type Sagas interface {
	Start(ctx context.Context, m order.Message) error
	Signal(ctx context.Context, orderID, name string) error
}

// Units is the Redis side (stock.Store).
type Units interface {
	Reservations(ctx context.Context, itemID int64) (map[string]order.Message, error)
	Restore(ctx context.Context, m order.Message) error
	Release(ctx context.Context, itemID int64, orderID string) (bool, error)
	Retire(ctx context.Context, itemID int64, orderID string) (bool, error)
	Recount(ctx context.Context, itemID, stockRow int64, deducted []string, set bool) (old, want int64, err error)
	AnnounceUnitBack(ctx context.Context, itemID int64) error
}

// Backlog is what waits in the items' outboxes (outbox.Stream).
type Backlog interface {
	OrderIDs(ctx context.Context, itemID int64) (map[string]bool, error)
}

var (
	_ Sagas   = (*workflows.Client)(nil)
	_ Units   = (*stock.Store)(nil)
	_ Backlog = (*outbox.Stream)(nil)
)

// Reconciler compares and repairs.
type Reconciler struct {
	db        *gorm.DB
	units     Units
	backlog   Backlog
	sagas     Sagas
	workflows invariant.WorkflowLister
	grace     time.Duration
	log       *slog.Logger
}

// New returns a reconciler. grace is how old a reservation or a QUEUED order
// must be before its missing pieces count as drift (the pipeline's own
// latency must not look like loss).
func New(db *gorm.DB, units Units, backlog Backlog, sagas Sagas, wf invariant.WorkflowLister, grace time.Duration, log *slog.Logger) *Reconciler {
	return &Reconciler{db: db, units: units, backlog: backlog, sagas: sagas, workflows: wf, grace: grace,
		log: log.With("component", "reconcile")}
}

// ActiveItems lists the items whose sale is live or ended within since.
func (r *Reconciler) ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error) {
	var ids []int64
	err := r.db.WithContext(ctx).Raw("SELECT id FROM item WHERE start_at <= ? AND end_at >= ? ORDER BY id",
		now.UTC(), now.Add(-since).UTC()).Scan(&ids).Error
	if err != nil {
		return nil, fmt.Errorf("list active items: %w", err)
	}
	return ids, nil
}

type row struct {
	OrderID   string
	UserID    int64
	Status    order.Status
	Reason    string
	CreatedAt time.Time
}

// Run checks every item, repairing what it safely can when repair is set.
func (r *Reconciler) Run(ctx context.Context, items []int64, repair bool) (Report, error) {
	rep := Report{At: time.Now().UTC(), Items: items, Repair: repair, Findings: []Finding{}}
	for _, id := range items {
		fs, err := r.item(ctx, id, repair)
		if err != nil {
			return rep, err
		}
		rep.Findings = append(rep.Findings, fs...)
	}
	return rep, nil
}

func (r *Reconciler) item(ctx context.Context, itemID int64, repair bool) ([]Finding, error) {
	now := time.Now()
	db := r.db.WithContext(ctx)
	var total int64
	if err := db.Raw("SELECT stock_total FROM item WHERE id = ?", itemID).Scan(&total).Error; err != nil || total == 0 {
		return nil, fmt.Errorf("item %d: %v", itemID, errors.Join(err, errors.New("not found")))
	}
	var stockRow, unrestored int64
	if err := db.Raw("SELECT stock FROM stock WHERE item_id = ?", itemID).Scan(&stockRow).Error; err != nil {
		return nil, fmt.Errorf("stock row of item %d: %w", itemID, err)
	}
	var deducted []string
	if err := db.Raw("SELECT order_id FROM stock_deduction WHERE item_id = ? AND restored = FALSE", itemID).Scan(&deducted).Error; err != nil {
		return nil, fmt.Errorf("deductions of item %d: %w", itemID, err)
	}
	unrestored = int64(len(deducted))
	var rows []row
	if err := db.Raw("SELECT order_id, user_id, status, reason, created_at FROM seckill_order WHERE item_id = ?", itemID).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("orders of item %d: %w", itemID, err)
	}
	byID := make(map[string]row, len(rows))
	for _, o := range rows {
		byID[o.OrderID] = o
	}
	resv, err := r.units.Reservations(ctx, itemID)
	if err != nil {
		return nil, err
	}
	queued, err := r.backlog.OrderIDs(ctx, itemID)
	if err != nil {
		return nil, err
	}
	running, sagas := map[string]bool{}, map[string]bool{}
	if r.workflows != nil {
		wfs, err := r.workflows.ListOrderWorkflows(ctx, itemID)
		if err != nil {
			return nil, err
		}
		for _, w := range wfs {
			sagas[w.OrderID] = true
			if w.Status == "Running" {
				running[w.OrderID] = true
			}
		}
	}
	var out []Finding
	add := func(f Finding) {
		f.ItemID = itemID
		if f.Repaired {
			r.log.Warn("drift repaired", "kind", f.Kind, "item_id", itemID, "order_id", f.OrderID, "action", f.Action)
		} else {
			r.log.Warn("drift found", "kind", f.Kind, "item_id", itemID, "order_id", f.OrderID, "detail", f.Detail)
		}
		out = append(out, f)
	}
	old := func(id string, at time.Time) bool {
		if u, err := ulid.Parse(id); err == nil {
			at = ulid.Time(u.Time())
		}
		return now.Sub(at) > r.grace
	}
	stockChanged := false

	// Live orders (MySQL holds their unit) whose Redis reservation is gone.
	for _, o := range rows {
		if o.Status != order.StatusPendingPayment && o.Status != order.StatusPaid {
			continue
		}
		if _, ok := resv[o.OrderID]; ok {
			continue
		}
		f := Finding{Kind: PaidUnitOnSale, OrderID: o.OrderID, Detail: fmt.Sprintf("%s in MySQL, no Redis reservation", o.Status)}
		if repair {
			m := order.Message{OrderID: o.OrderID, ItemID: itemID, UserID: o.UserID, ReservedAt: o.CreatedAt.UTC()}
			if err := r.units.Restore(ctx, m); err != nil {
				return nil, err
			}
			resv[o.OrderID] = m
			f.Repaired, f.Action, stockChanged = true, "reservation and buyer mark put back", true
		}
		add(f)
	}
	// Final orders whose unit Redis still holds, with no saga to release it.
	for id := range resv {
		o, ok := byID[id]
		if !ok || (o.Status != order.StatusCancelled && o.Status != order.StatusFailed) || running[id] {
			continue
		}
		f := Finding{Kind: FinalUnitHeld, OrderID: id, Detail: fmt.Sprintf("%s (%s) but its Redis reservation is held", o.Status, o.Reason)}
		if repair {
			phantom := strings.HasPrefix(o.Reason, order.ReasonStockExhausted)
			var err error
			if phantom {
				_, err = r.units.Retire(ctx, itemID, id)
				f.Action = "reservation retired (the stock row never had the unit)"
			} else {
				_, err = r.units.Release(ctx, itemID, id)
				f.Action = "unit released"
			}
			if err != nil {
				return nil, err
			}
			delete(resv, id)
			f.Repaired, stockChanged = true, true
		}
		add(f)
	}
	// Reservations that never reached a saga.
	for id, m := range resv {
		if _, ok := byID[id]; ok || queued[id] || sagas[id] {
			continue
		}
		if !old(id, m.ReservedAt) {
			continue
		}
		f := Finding{Kind: LostHandoff, OrderID: id, Detail: "reserved in Redis; no outbox entry, no order row, no saga"}
		if repair && r.sagas != nil {
			if err := r.sagas.Start(ctx, m); err != nil {
				return nil, err
			}
			f.Repaired, f.Action = true, "saga started from the reservation"
		}
		add(f)
	}
	// Sagas that run for orders already final: wake them, they follow the row.
	for id := range running {
		o, ok := byID[id]
		if !ok || !o.Status.Final() {
			continue
		}
		f := Finding{Kind: SagaForFinalOrder, OrderID: id, Detail: fmt.Sprintf("saga running, order %s", o.Status)}
		if repair && r.sagas != nil {
			signal := workflows.SignalCancel
			if o.Status == order.StatusPaid {
				signal = workflows.SignalPay
			}
			if err := r.sagas.Signal(ctx, id, signal); err != nil && !errors.Is(err, order.ErrNotFound) {
				return nil, err
			}
			f.Repaired, f.Action = true, "saga woken with "+signal
		}
		add(f)
	}
	// Orders stuck before PENDING_PAYMENT.
	for _, o := range rows {
		if o.Status == order.StatusQueued && old(o.OrderID, o.CreatedAt) {
			add(Finding{Kind: StuckQueued, OrderID: o.OrderID, Detail: "QUEUED in MySQL past the grace period; see its saga"})
		}
	}
	// The stock row against its deductions (MySQL's own bookkeeping).
	if stockRow != total-unrestored {
		add(Finding{Kind: StockRow, Detail: fmt.Sprintf("stock row %d, want S %d - unrestored deductions %d = %d",
			stockRow, total, unrestored, total-unrestored), Action: "report only: MySQL is the ground truth; ask an engineer"})
	}
	// Redis stock_left against the units held.
	f, err := r.redisStock(ctx, itemID, stockRow, deducted, repair)
	if err != nil {
		return nil, err
	}
	if f != nil {
		add(*f)
	} else if stockChanged {
		r.log.Info("stock_left consistent after the repairs", "item_id", itemID)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	return out, nil
}

func (r *Reconciler) redisStock(ctx context.Context, itemID, stockRow int64, deducted []string, repair bool) (*Finding, error) {
	oldLeft, want, err := r.units.Recount(ctx, itemID, stockRow, deducted, repair)
	if err != nil {
		return nil, err
	}
	if oldLeft == want {
		return nil, nil
	}
	f := &Finding{Kind: RedisStock, Detail: fmt.Sprintf("stock_left %d, want %d (the stock row %d minus the reservations not deducted yet)", oldLeft, want, stockRow)}
	if repair {
		f.Repaired, f.Action = true, fmt.Sprintf("stock_left set to %d", want)
		if want > oldLeft {
			_ = r.units.AnnounceUnitBack(ctx, itemID) // sold-out flags clear
		}
	}
	return f, nil
}
