package payment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// maxBatch bounds one batch: one INSERT's rows, one pipeline's commands.
const maxBatch = 64

// door gathers the concurrent early pays and cancels into batches, as a
// flash sale's winners pay all at once: one round trip reads the batch's
// views, one its reservations, one INSERT writes every decision proven, one
// round trip publishes them. Whoever finds no batch running starts the
// runner, which takes whatever waits until nothing does; nothing waits for
// a timer (a lone pay is a batch of one).
type door struct {
	mu      sync.Mutex
	waiting []*ask
	running bool
}

// ask is one early pay or cancel, and what its batch found.
type ask struct {
	ctx        context.Context
	orderID    string
	userID     int64
	receivedAt time.Time
	pay        bool
	done       chan struct{}

	row     store.Order   // decided: the row written
	decided bool          // the batch wrote and published the decision
	m       order.Message // live: the caller's reservation, not written by the batch
	live    bool
	theirs  bool // the order's view names the caller; the row decides
	err     error
}

// ask waits for a's batch.
func (d *Desk) ask(a *ask) error {
	a.done = make(chan struct{})
	d.door.mu.Lock()
	d.door.waiting = append(d.door.waiting, a)
	start := !d.door.running
	d.door.running = true
	d.door.mu.Unlock()
	if start {
		go d.runBatches()
	}
	select {
	case <-a.done:
		return a.err
	case <-a.ctx.Done():
		// The batch may still write it: not known.
		return a.ctx.Err()
	}
}

func (d *Desk) runBatches() {
	for {
		d.door.mu.Lock()
		n := min(len(d.door.waiting), maxBatch)
		if n == 0 {
			d.door.running = false
			d.door.mu.Unlock()
			return
		}
		batch := d.door.waiting[:n:n]
		d.door.waiting = d.door.waiting[n:]
		d.door.mu.Unlock()
		d.runBatch(batch)
		for _, a := range batch {
			close(a.done)
		}
	}
}

// runBatch proves each ask from its view and its live reservation, then
// inserts the rows of those proven (store.InsertEarly). An ask it does not
// decide is left to its caller: live (its row appeared meanwhile, or the
// INSERT failed: RecordEarly decides it alone) or not (the row decides).
func (d *Desk) runBatch(batch []*ask) {
	// Every ask's limit is order.DoorLimit after its arrival; the batch
	// stops at the first (they arrived within moments of each other).
	deadline := batch[0].receivedAt
	ids := make([]string, 0, len(batch))
	for _, a := range batch {
		if a.receivedAt.Before(deadline) {
			deadline = a.receivedAt
		}
		ids = append(ids, a.orderID)
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(batch[0].ctx), deadline.Add(order.DoorLimit))
	defer cancel()
	fail := func(asks []*ask, err error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrNotRecorded, err)
		}
		for _, a := range asks {
			a.err = err
		}
	}
	views, err := d.views.Statuses(ctx, ids)
	if err != nil {
		fail(batch, err)
		return
	}
	var held []*ask
	var items []int64
	ids = ids[:0]
	for i, a := range batch {
		v := views[i]
		switch {
		case v.OrderID != "" && v.UserID != a.userID:
			a.err = fmt.Errorf("order %s: %w", a.orderID, order.ErrNotFound)
		case v.Status == order.StatusQueued && v.ItemID > 0:
			held, items, ids = append(held, a), append(items, v.ItemID), append(ids, a.orderID)
		default:
			a.theirs = v.OrderID != ""
		}
	}
	if len(held) == 0 {
		return
	}
	msgs, err := d.units.Reservations(ctx, items, ids)
	if err != nil {
		fail(held, err)
		return
	}
	var proven []*ask
	var ds []store.Early
	seen := make(map[string]bool, len(held))
	for i, a := range held {
		m := msgs[i]
		switch {
		case m.OrderID != "" && m.UserID != a.userID:
			a.err = fmt.Errorf("order %s: %w", a.orderID, order.ErrNotFound)
		case m.OrderID == "" || !m.QueuedView().Payable(a.receivedAt):
			// Released (the row says why), late, or reserved by an API from
			// before early payment (no deadline): the row decides.
			a.theirs = true
		case seen[a.orderID]:
			a.m, a.live = m, true // a second pay of one order: one INSERT may not hold both
		default:
			seen[a.orderID] = true
			a.m, a.live = m, true
			proven, ds = append(proven, a), append(ds, store.Early{M: m, ReceivedAt: a.receivedAt, Pay: a.pay})
		}
	}
	if len(ds) == 0 {
		return
	}
	rows, err := d.orders.InsertEarly(ctx, ds)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			fail(proven, err)
		}
		return // each proven ask tries alone
	}
	published := make([]order.View, len(rows))
	for i, a := range proven {
		a.row, a.decided, published[i] = rows[i], true, rows[i].View()
	}
	// GET and the event streams see the decisions at once; a failure leaves
	// them on the database (GET falls back to it for stale views).
	if _, err := d.statuses.PublishAll(ctx, published); err != nil {
		d.log.Warn("publish statuses", "orders", len(published), "err", err)
	}
}
