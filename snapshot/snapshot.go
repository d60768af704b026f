// Package snapshot reads one item's world (MySQL, Redis, its outbox, its
// sagas) into one Item for the invariant checker and the reconciler. Each
// system is read in one consistent step, going the pipeline backwards, so a
// cross-system rule errs on the side of "not yet".
package snapshot

import (
	"context"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// MySQL is store.Store.
type MySQL interface {
	ReadItemState(ctx context.Context, itemID int64) (store.ItemState, error)
}

// Redis is stock.Store.
type Redis interface {
	ReadItemState(ctx context.Context, itemID int64) (stock.ItemState, error)
}

// Outbox is outbox.Stream.
type Outbox interface {
	OrderIDs(ctx context.Context, itemID int64) (map[string]bool, error)
}

type WorkflowLister interface {
	ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error)
}

// Sources are the systems a snapshot reads; Outbox and Workflows may be nil.
type Sources struct {
	MySQL     MySQL
	Redis     Redis
	Outbox    Outbox
	Workflows WorkflowLister
}

type Item struct {
	ID        int64
	At        time.Time // when the MySQL read began
	MySQL     store.ItemState
	Redis     stock.ItemState
	Outbox    map[string]bool // nil when not read
	Workflows []Workflow
	// WorkflowsRead says the sagas were listed, WorkflowsErr why not.
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
		// The rest stands without the sagas; each user decides what it can judge.
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
// FAILED) or never held a stock-row unit (REFUNDED).
func Released(s order.Status) bool {
	return s == order.StatusCancelled || s == order.StatusFailed || s == order.StatusRefunded
}

// WakesBy is when a running saga of a final order wakes on its own at the
// latest: pay_by + order.PayGrace, or, without a deadline (its own saga
// closed it), the row's last update.
func WakesBy(o store.Order) time.Time {
	if o.PayBy != nil {
		return o.PayBy.Add(order.PayGrace)
	}
	return o.UpdatedAt
}

// Age is how old an order is at the snapshot, from its ULID's time or created.
func (it *Item) Age(orderID string, created time.Time) time.Duration {
	return it.At.Sub(order.IDTime(orderID, created))
}
