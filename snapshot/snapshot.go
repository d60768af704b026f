// Package snapshot reads one item's world (MySQL, Redis, its outbox, its
// Temporal sagas) into one value, Item, that the invariant checker and the
// reconciler judge with small rule functions of their own.
//
// Each system is read in one consistent step; between the systems time
// passes, so the reads go the pipeline backwards (MySQL, Redis, the outbox,
// Temporal) and a cross-system rule errs on the side of "not yet": a
// reservation made after the MySQL read is young, and an order persisted
// after it has its saga in the later Temporal read.
package snapshot

import (
	"context"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// MySQL reads an item's rows in one consistent snapshot (store.Store).
type MySQL interface {
	ReadItemState(ctx context.Context, itemID int64) (store.ItemState, error)
}

// Redis reads an item's keys atomically (stock.Store).
type Redis interface {
	ReadItemState(ctx context.Context, itemID int64) (stock.ItemState, error)
}

// Outbox lists the order ids waiting in an item's outbox (outbox.Stream).
type Outbox interface {
	OrderIDs(ctx context.Context, itemID int64) (map[string]bool, error)
}

// WorkflowLister lists the order workflows of an item (TemporalLister). Its
// error names the read that failed, the item's included.
type WorkflowLister interface {
	ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error)
}

var (
	_ MySQL          = (*store.Store)(nil)
	_ Redis          = (*stock.Store)(nil)
	_ Outbox         = (*outbox.Stream)(nil)
	_ WorkflowLister = TemporalLister{}
)

// Sources are the systems a snapshot reads; Outbox and Workflows may be nil.
type Sources struct {
	MySQL     MySQL
	Redis     Redis
	Outbox    Outbox
	Workflows WorkflowLister
}

type Item struct {
	ID    int64
	At    time.Time // when the MySQL read began
	MySQL store.ItemState
	Redis stock.ItemState
	// Outbox holds the order ids waiting in the outbox; nil when not read.
	Outbox map[string]bool
	// Workflows are the item's sagas; WorkflowsRead says they were listed,
	// WorkflowsErr why not when they could not be.
	Workflows     []Workflow
	WorkflowsRead bool
	WorkflowsErr  error

	Orders     map[string]store.Order          // by order id
	Deductions map[string]store.StockDeduction // by order id
	Sagas      map[string]Workflow             // by order id
}

func Load(ctx context.Context, src Sources, itemID int64) (*Item, error) {
	at := time.Now()
	db, err := src.MySQL.ReadItemState(ctx, itemID)
	if err != nil {
		return nil, err
	}
	rd, err := src.Redis.ReadItemState(ctx, itemID)
	if err != nil {
		return nil, err
	}
	var ob map[string]bool
	if src.Outbox != nil {
		if ob, err = src.Outbox.OrderIDs(ctx, itemID); err != nil {
			return nil, err
		}
	}
	var wfs []Workflow
	var wfErr error
	if src.Workflows != nil {
		// Temporal's visibility is the part most often slow or away; the
		// MySQL and Redis parts stand without it, and each user decides
		// whether it can judge without the sagas.
		wfs, wfErr = src.Workflows.ListOrderWorkflows(ctx, itemID)
	}
	it := New(itemID, at, db, rd, ob, wfs, src.Workflows != nil && wfErr == nil)
	it.WorkflowsErr = wfErr
	return it, nil
}

// New assembles an Item from parts already read (Load, and tests).
func New(itemID int64, at time.Time, db store.ItemState, rd stock.ItemState, ob map[string]bool, wfs []Workflow, wfRead bool) *Item {
	it := &Item{ID: itemID, At: at, MySQL: db, Redis: rd, Outbox: ob, Workflows: wfs, WorkflowsRead: wfRead,
		Orders:     make(map[string]store.Order, len(db.Orders)),
		Deductions: make(map[string]store.StockDeduction, len(db.Deductions)),
		Sagas:      make(map[string]Workflow, len(wfs)),
	}
	for _, o := range db.Orders {
		it.Orders[o.OrderID] = o
	}
	for _, d := range db.Deductions {
		it.Deductions[d.OrderID] = d
	}
	for _, w := range wfs {
		it.Sagas[w.OrderID] = w
	}
	return it
}

// Live reports whether an order status holds a unit (PENDING_PAYMENT, PAID).
func Live(s order.Status) bool { return s == order.StatusPendingPayment || s == order.StatusPaid }

// Released reports whether an order status gave its unit back (CANCELLED,
// FAILED) or never held a stock-row unit (REFUNDED: paid while QUEUED, the
// stock row had none; its phantom reservation is retired).
func Released(s order.Status) bool {
	return s == order.StatusCancelled || s == order.StatusFailed || s == order.StatusRefunded
}

// WakesBy is when a running saga of a final order wakes on its own at the
// latest: its payment timer fires at pay_by + order.PayGrace. An order closed
// without a deadline was closed by its own saga, which is finishing: then its
// row's last update.
func WakesBy(o store.Order) time.Time {
	if o.PayBy != nil {
		return o.PayBy.Add(order.PayGrace)
	}
	return o.UpdatedAt
}

// Age is how old an order is at the snapshot: from the time in its ULID, or
// else from created.
func (it *Item) Age(orderID string, created time.Time) time.Duration {
	return it.At.Sub(order.IDTime(orderID, created))
}
