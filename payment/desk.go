// Package payment judges a buyer's pay or cancel at the door, by a
// conditional update of the order row; the saga follows the row.
package payment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// Orders records the decision on the order row (store.Store).
type Orders interface {
	RecordPayment(ctx context.Context, orderID string, userID int64, receivedAt time.Time, early bool) (_ store.Order, changed bool, _ error)
	RecordCancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time, early bool) (_ store.Order, changed bool, _ error)
	InsertEarly(ctx context.Context, ds []store.Early) ([]store.Order, error)
}

// Views reads orders' latest views in Redis (orderstatus.Board).
type Views interface {
	Statuses(ctx context.Context, orderIDs []string) ([]order.View, error)
}

// Reservations reads orders' live reservations in Redis (stock.Store).
type Reservations interface {
	Reservations(ctx context.Context, itemIDs []int64, orderIDs []string) ([]order.Message, error)
}

// Statuses publishes orders' views for the API instances (orderstatus.Board).
type Statuses interface {
	PublishAll(ctx context.Context, views []order.View) ([]bool, error)
}

// Sagas wakes the order's saga (workflows.Client).
type Sagas interface {
	Signal(ctx context.Context, orderID, name string) error
}

// Counter counts wakes that could not be sent (a Prometheus counter).
type Counter interface{ Inc() }

// ErrNotRecorded: not known to be recorded within order.DoorLimit (HTTP 503).
var ErrNotRecorded = errors.New("not recorded in time")

// Options tune the desk.
type Options struct {
	WakeRate  float64 // signals per second: during a sale Temporal's capacity is new orders'
	MaxQueued int     // wakes waiting (100,000 when 0); past it a wake is skipped
}

const wakeTimeout = 10 * time.Second

// Desk takes buyers' pays and cancels; Run sends the wakes.
type Desk struct {
	orders   Orders
	statuses Statuses
	sagas    func() (Sagas, error)
	skipped  Counter
	opts     Options
	log      *slog.Logger
	wakes    chan wake
	views    Views
	units    Reservations
	door     door
}

type wake struct{ orderID, signal string }

// New returns a desk; sagas errs while Temporal is not reachable.
func New(orders Orders, statuses Statuses, views Views, units Reservations, sagas func() (Sagas, error), skipped Counter, opts Options, log *slog.Logger) (*Desk, error) {
	if opts.WakeRate <= 0 {
		return nil, fmt.Errorf("payment: wake rate %v: must be positive (SECKILL_API_WAKE_RATE)", opts.WakeRate)
	}
	if opts.MaxQueued <= 0 {
		opts.MaxQueued = 100_000
	}
	return &Desk{orders: orders, statuses: statuses, views: views, units: units, sagas: sagas, skipped: skipped, opts: opts,
		log: log.With("component", "payment"), wakes: make(chan wake, opts.MaxQueued)}, nil
}

// Run sends the queued wakes at Options.WakeRate until ctx ends.
func (d *Desk) Run(ctx context.Context) {
	lim := rate.NewLimiter(rate.Limit(d.opts.WakeRate), max(1, int(d.opts.WakeRate)))
	for {
		var w wake
		select {
		case <-ctx.Done():
			return
		case w = <-d.wakes:
		}
		if lim.Wait(ctx) != nil {
			return
		}
		d.send(ctx, w)
	}
}

func (d *Desk) send(ctx context.Context, w wake) {
	sagas, err := d.sagas()
	if err == nil {
		sctx, cancel := context.WithTimeout(ctx, wakeTimeout)
		err = sagas.Signal(sctx, w.orderID, w.signal)
		cancel()
	}
	if err != nil && !errors.Is(err, order.ErrNotFound) {
		d.skipped.Inc()
		d.log.Warn("saga not woken; it finds the order row at its deadline", "order_id", w.orderID, "signal", w.signal, "err", err)
	}
}

// Pay records the buyer's payment received at receivedAt and answers with the
// PAID order; order.ErrNotFound, order.ErrNotPayable (with the order) or ErrNotRecorded.
func (d *Desk) Pay(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error) {
	return d.decide(ctx, orderID, userID, receivedAt, true)
}

// Cancel records the buyer's cancel of an unpaid order; errors as for Pay.
func (d *Desk) Cancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error) {
	return d.decide(ctx, orderID, userID, receivedAt, false)
}

func (d *Desk) decide(ctx context.Context, orderID string, userID int64, receivedAt time.Time, pay bool) (order.View, error) {
	// A write still waiting when the saga's close is due would be refused
	// though received in time: give up well before.
	ctx, cancel := context.WithDeadline(ctx, receivedAt.Add(order.DoorLimit))
	defer cancel()
	signal, update := workflows.SignalPay, d.orders.RecordPayment
	if !pay {
		signal, update = workflows.SignalCancel, d.orders.RecordCancel
	}
	// A QUEUED order is decided in the door's next batch (door.go); what it leaves, the row decides.
	a := &ask{ctx: ctx, orderID: orderID, userID: userID, receivedAt: receivedAt, pay: pay}
	if err := d.ask(a); err != nil {
		return d.after(ctx, store.Order{}, false, err, signal, false)
	}
	if a.decided {
		return a.row.View(), nil // published; no saga to wake yet: the saga finds the row
	}
	row, changed, err := update(ctx, orderID, userID, receivedAt, true)
	if a.theirs && errors.Is(err, order.ErrNotFound) {
		err = fmt.Errorf("order %s holds no unit, or its buyer another order of the item: %w", orderID, order.ErrNotPayable)
	}
	// A paid QUEUED row needs no wake: the saga makes it PAID with its unit.
	return d.after(ctx, row, changed, err, signal, !row.PaidQueued())
}

func (d *Desk) after(ctx context.Context, row store.Order, changed bool, err error, signal string, wake bool) (order.View, error) {
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// Whether the UPDATE landed is not known: GET answers.
		return order.View{}, fmt.Errorf("%s: %w: %w", signal, ErrNotRecorded, err)
	case err != nil:
		return row.View(), err
	}
	v := row.View()
	if !changed {
		return v, nil // a repeated pay: already published, the saga already woken
	}
	// A failure leaves GET on the database (its fallback for stale views).
	if _, perr := d.statuses.PublishAll(ctx, []order.View{v}); perr != nil {
		d.log.Warn("publish status", "order_id", v.OrderID, "status", v.Status, "err", perr)
	}
	if wake {
		d.wake(v.OrderID, signal)
	}
	return v, nil
}

// wake queues the saga's wake; Run sends it.
func (d *Desk) wake(orderID, signal string) {
	select {
	case d.wakes <- wake{orderID: orderID, signal: signal}:
	default:
		d.skipped.Inc()
	}
}
