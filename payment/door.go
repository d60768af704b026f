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

// maxBatch bounds one batch; maxBatches those in flight (one fell behind a sale's burst).
const maxBatch, maxBatches = 64, 4

// door gathers concurrent early pays and cancels into batches of a few
// round trips; a runner runs until nothing waits (no timer).
type door struct {
	mu      sync.Mutex
	waiting []*ask
	runners int
}

// ask is one early pay or cancel and what its batch found.
type ask struct {
	ctx             context.Context
	orderID         string
	userID          int64
	receivedAt      time.Time
	pay             bool
	done            chan struct{}
	row             store.Order
	decided, theirs bool
	err             error
}

// ask waits for a's batch.
func (d *Desk) ask(a *ask) error {
	a.done = make(chan struct{})
	d.door.mu.Lock()
	d.door.waiting = append(d.door.waiting, a)
	start := d.door.runners < maxBatches
	if start {
		d.door.runners++
	}
	d.door.mu.Unlock()
	if start {
		go d.runBatches()
	}
	select {
	case <-a.done:
		return a.err
	case <-a.ctx.Done():
		return a.ctx.Err() // the batch may still write it: not known
	}
}

func (d *Desk) runBatches() {
	for {
		d.door.mu.Lock()
		n := min(len(d.door.waiting), maxBatch)
		batch := d.door.waiting[:n:n]
		d.door.waiting = d.door.waiting[n:]
		if n == 0 {
			d.door.runners--
			d.door.mu.Unlock()
			return
		}
		d.door.mu.Unlock()
		d.runBatch(batch)
		for _, a := range batch {
			close(a.done)
		}
	}
}

func (d *Desk) runBatch(batch []*ask) {
	// The batch ends at the first ask's limit (they arrived moments apart).
	first := batch[0].receivedAt
	ids := make([]string, len(batch))
	for i, a := range batch {
		ids[i] = a.orderID
		if a.receivedAt.Before(first) {
			first = a.receivedAt
		}
	}
	ctx, cancel := context.WithDeadline(context.WithoutCancel(batch[0].ctx), first.Add(order.DoorLimit))
	defer cancel()
	fail := func(asks []*ask, err error) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = fmt.Errorf("%w: %w", ErrNotRecorded, err)
		}
		for _, a := range asks {
			if !a.decided && !a.theirs {
				a.err = err
			}
		}
	}
	views, err := d.views.Statuses(ctx, ids)
	if err != nil {
		fail(batch, err)
		return
	}
	var queued []*ask
	var items []int64
	ids = ids[:0]
	for i, a := range batch {
		switch v := views[i]; {
		case v.OrderID != "" && v.UserID != a.userID:
			a.err = fmt.Errorf("order %s: %w", a.orderID, order.ErrNotFound)
		case v.Status == order.StatusQueued && v.ItemID > 0:
			queued, items, ids = append(queued, a), append(items, v.ItemID), append(ids, a.orderID)
		default:
			a.theirs = v.OrderID != ""
		}
	}
	msgs, err := d.units.Reservations(ctx, items, ids)
	if err != nil {
		fail(queued, err)
		return
	}
	var proven []*ask
	var ds []store.Early
	seen := make(map[string]bool, len(queued))
	for i, a := range queued {
		switch m := msgs[i]; {
		case m.OrderID != "" && m.UserID != a.userID:
			a.err = fmt.Errorf("order %s: %w", a.orderID, order.ErrNotFound)
		case m.OrderID == "" || m.PayBy == nil || !a.receivedAt.Before(*m.PayBy):
			a.theirs = true // released, late, or without a deadline: the row decides
		case seen[a.orderID]:
			a.theirs = true // a second pay of the order: the row the first writes decides
		default:
			seen[a.orderID] = true
			proven, ds = append(proven, a), append(ds, store.Early{M: m, ReceivedAt: a.receivedAt, Pay: a.pay})
		}
	}
	if len(ds) == 0 {
		return
	}
	if err := d.insert(ctx, proven, ds); err != nil {
		fail(proven, err)
	}
	views = views[:0]
	for _, a := range proven {
		if a.decided {
			views = append(views, a.row.View())
		}
	}
	if len(views) == 0 {
		return
	}
	if _, err := d.statuses.PublishAll(ctx, views); err != nil {
		d.log.Warn("publish statuses", "orders", len(views), "err", err)
	}
}

// insert writes the proven decisions in one INSERT, or each alone when one meets a row.
func (d *Desk) insert(ctx context.Context, asks []*ask, ds []store.Early) error {
	rows, err := d.orders.InsertEarly(ctx, ds)
	switch {
	case errors.Is(err, store.ErrDuplicate) && ctx.Err() == nil && len(asks) > 1:
		for i := range asks {
			if err := d.insert(ctx, asks[i:i+1], ds[i:i+1]); err != nil {
				return err
			}
		}
		return nil
	case errors.Is(err, store.ErrDuplicate) && ctx.Err() == nil:
		asks[0].theirs = true
		return nil
	case err != nil:
		return err
	}
	for i, a := range asks {
		a.row, a.decided = rows[i], true
	}
	return nil
}
