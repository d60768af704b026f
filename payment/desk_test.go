package payment_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// fakeOrders answers RecordPayment/RecordCancel with a fixed row (counting
// the calls); InsertEarly writes QUEUED paid rows, or fails with
// store.ErrDuplicate when a decision's order is in dups, each call held
// until gate lets it go (when set). written records the messages of the
// rows written.
type fakeOrders struct {
	row     store.Order
	changed bool
	err     error

	dups      map[string]bool
	insertErr error // every InsertEarly fails with it (MySQL away)
	gate      chan struct{}
	mu        sync.Mutex
	updates   int
	inserts   []int // rows per InsertEarly call
	written   []order.Message
}

func (f *fakeOrders) RecordPayment(context.Context, string, int64, time.Time, bool) (store.Order, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updates++
	return f.row, f.changed, f.err
}

func (f *fakeOrders) RecordCancel(ctx context.Context, id string, user int64, at time.Time, early bool) (store.Order, bool, error) {
	return f.RecordPayment(ctx, id, user, at, early)
}

func (f *fakeOrders) InsertEarly(_ context.Context, ds []store.Early) ([]store.Order, error) {
	if f.gate != nil {
		<-f.gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inserts = append(f.inserts, len(ds))
	if f.insertErr != nil {
		return nil, f.insertErr
	}
	rows := make([]store.Order, len(ds))
	for i, d := range ds {
		if f.dups[d.M.OrderID] {
			return nil, fmt.Errorf("insert: %w", store.ErrDuplicate)
		}
		rows[i] = store.Order{OrderID: d.M.OrderID, UserID: d.M.UserID, ItemID: d.M.ItemID, Status: order.StatusQueued,
			PayBy: d.M.PayBy, PaidAt: &d.ReceivedAt}
	}
	for _, d := range ds {
		f.written = append(f.written, d.M)
	}
	return rows, nil
}

type fakeStatuses struct {
	mu    sync.Mutex
	got   []order.View
	empty int // calls with nothing to publish
}

func (f *fakeStatuses) PublishAll(_ context.Context, vs []order.View) ([]bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(vs) == 0 {
		f.empty++
	}
	f.got = append(f.got, vs...)
	return make([]bool, len(vs)), nil
}

func (f *fakeStatuses) published() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.got)
}

type fakeSagas struct {
	signals chan string
}

func (f *fakeSagas) Signal(_ context.Context, orderID, name string) error {
	f.signals <- name + " " + orderID
	return nil
}

type count struct{ n atomic.Int64 }

func (c *count) Inc() { c.n.Add(1) }

// newDesk is a desk over fakes; rd nil is a Redis that holds no view and no
// reservation (every order's row decides).
func newDesk(t *testing.T, o *fakeOrders, st *fakeStatuses, rd *fakeRedis, sg *fakeSagas, opts payment.Options) (*payment.Desk, *count) {
	skipped := &count{}
	if opts.WakeRate == 0 {
		opts.WakeRate = 1000
	}
	if rd == nil {
		rd = &fakeRedis{}
	}
	d, err := payment.New(o, st, rd, rd, func() (payment.Sagas, error) { return sg, nil }, skipped, opts,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return d, skipped
}

func payBy() *time.Time { t := time.Now().Add(time.Minute); return &t }

// A recorded pay is published and wakes the saga once; a repeated pay of a
// PAID order wakes nothing.
func TestPayRecordsPublishesAndWakesOnce(t *testing.T) {
	row := store.Order{OrderID: "O1", UserID: 7, ItemID: 1, Status: order.StatusPaid, PayBy: payBy()}
	o, st, sg := &fakeOrders{row: row, changed: true}, &fakeStatuses{}, &fakeSagas{signals: make(chan string, 4)}
	d, _ := newDesk(t, o, st, nil, sg, payment.Options{})
	v, err := d.Pay(context.Background(), "O1", 7, time.Now())
	if err != nil || v.Status != order.StatusPaid {
		t.Fatalf("pay: %+v %v", v, err)
	}
	select {
	case got := <-sg.signals:
		if got != workflows.SignalPay+" O1" {
			t.Fatalf("signal %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("saga not woken")
	}
	o.changed = false
	if v, err := d.Pay(context.Background(), "O1", 7, time.Now()); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("second pay: %+v %v", v, err)
	}
	st.mu.Lock()
	published := len(st.got)
	st.mu.Unlock()
	if published != 1 || len(sg.signals) != 0 {
		t.Fatalf("published %d times, %d extra signals; want 1 and 0", published, len(sg.signals))
	}
}

// Refusals and unknown orders are passed on as the API maps them.
func TestPayErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    *fakeOrders
		want error
	}{
		{"not found", &fakeOrders{err: order.ErrNotFound}, order.ErrNotFound},
		{"late", &fakeOrders{row: store.Order{Status: order.StatusPendingPayment, PayBy: payBy()}, err: order.ErrNotPayable}, order.ErrNotPayable},
		{"closed", &fakeOrders{row: store.Order{Status: order.StatusCancelled}, err: order.ErrNotPayable}, order.ErrNotPayable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := newDesk(t, tc.o, &fakeStatuses{}, nil, &fakeSagas{signals: make(chan string, 1)}, payment.Options{})
			if _, err := d.Pay(context.Background(), "O1", 7, time.Now()); !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
}

// Wakes are queued and paced; past MaxQueued they are skipped and counted.
func TestWakesPacedAndBounded(t *testing.T) {
	row := store.Order{OrderID: "O3", Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled, PayBy: payBy()}
	sg := &fakeSagas{signals: make(chan string, 100)}
	// One wake a minute after the first: the first is sent at once.
	d, skipped := newDesk(t, &fakeOrders{row: row, changed: true}, &fakeStatuses{}, nil, sg, payment.Options{WakeRate: 1.0 / 60, MaxQueued: 2})
	cancel := func() {
		if _, err := d.Cancel(context.Background(), "O3", 7, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	select {
	case <-sg.signals:
	case <-time.After(5 * time.Second):
		t.Fatal("first wake not sent")
	}
	// Five more: the dispatcher may hold one while it waits for the pacer,
	// the queue holds two, the rest are skipped; none is sent yet.
	for range 5 {
		cancel()
	}
	if n := skipped.n.Load(); n < 2 || n > 3 {
		t.Fatalf("%d wakes skipped, want 2 or 3 of 5", n)
	}
	if len(sg.signals) != 0 {
		t.Fatalf("%d wakes sent past the pace", len(sg.signals))
	}
}

// fakeRedis holds the orders' views and reservations.
type fakeRedis struct {
	views map[string]order.View
	res   map[string]order.Message
}

func (f *fakeRedis) Statuses(_ context.Context, ids []string) ([]order.View, error) {
	out := make([]order.View, len(ids))
	for i, id := range ids {
		out[i] = f.views[id]
	}
	return out, nil
}

func (f *fakeRedis) Reservations(_ context.Context, items []int64, ids []string) ([]order.Message, error) {
	out := make([]order.Message, len(ids))
	for i, id := range ids {
		if m := f.res[id]; m.ItemID == items[i] {
			out[i] = m
		}
	}
	return out, nil
}

// queued is a fakeRedis holding QUEUED orders Q0..Qn-1 of buyers 100..,
// each with its live reservation.
func queued(n int, payBy *time.Time) *fakeRedis {
	rd := &fakeRedis{views: map[string]order.View{}, res: map[string]order.Message{}}
	for i := range n {
		id, user := fmt.Sprintf("Q%d", i), int64(100+i)
		rd.views[id] = order.View{OrderID: id, ItemID: 3, UserID: user, Status: order.StatusQueued, PayBy: payBy}
		rd.res[id] = order.Message{OrderID: id, ItemID: 3, UserID: user, PayBy: payBy}
	}
	return rd
}

// With early payment, an order without a row is payable if the caller holds
// its live reservation; an order id that is not the caller's (unknown,
// forged, another buyer's) or holds no unit writes nothing. A pay recorded
// while QUEUED is published and wakes no saga (the saga takes the unit and
// settles it).
func TestEarlyPayProvesTheReservationFirst(t *testing.T) {
	deadline := payBy()
	rd := queued(1, deadline) // Q0, buyer 100
	for id, v := range map[string]order.View{
		"Q2": {ItemID: 3, UserID: 7, Status: order.StatusQueued}, // reservation gone
		"Q3": {ItemID: 3, UserID: 7, Status: order.StatusQueued}, // view claims buyer 7, reservation says 8
		"Q4": {ItemID: 3, UserID: 7, Status: order.StatusQueued}, // reserved by an old API: no deadline
		"Q5": {ItemID: 3, UserID: 8, Status: order.StatusQueued}, // another buyer's
		"Q6": {ItemID: 3, UserID: 7, Status: order.StatusQueued}, // the deadline passed
	} {
		v.OrderID = id
		rd.views[id] = v
	}
	rd.res["Q3"] = order.Message{OrderID: "Q3", ItemID: 3, UserID: 8, PayBy: deadline}
	rd.res["Q4"] = order.Message{OrderID: "Q4", ItemID: 3, UserID: 7}
	rd.res["Q5"] = order.Message{OrderID: "Q5", ItemID: 3, UserID: 8, PayBy: deadline}
	past := time.Now().Add(-time.Second)
	rd.res["Q6"] = order.Message{OrderID: "Q6", ItemID: 3, UserID: 7, PayBy: &past}
	for _, tc := range []struct {
		id   string
		want error
	}{
		{"Q9", order.ErrNotFound}, {"Q2", order.ErrNotPayable}, {"Q3", order.ErrNotFound},
		{"Q4", order.ErrNotPayable}, {"Q5", order.ErrNotFound}, {"Q6", order.ErrNotPayable},
	} {
		o := &fakeOrders{err: order.ErrNotFound}
		d, _ := newDesk(t, o, &fakeStatuses{}, rd, &fakeSagas{signals: make(chan string, 1)}, payment.Options{})
		if _, err := d.Pay(context.Background(), tc.id, 7, time.Now()); !errors.Is(err, tc.want) || len(o.written) != 0 {
			t.Fatalf("%s: err %v, wrote %v; want %v and nothing written", tc.id, err, o.written, tc.want)
		}
	}

	o, st, sg := &fakeOrders{err: order.ErrNotFound}, &fakeStatuses{}, &fakeSagas{signals: make(chan string, 1)}
	d, _ := newDesk(t, o, st, rd, sg, payment.Options{WakeRate: 1000})
	v, err := d.Pay(context.Background(), "Q0", 100, time.Now())
	if err != nil || v.Status != order.StatusPaid || !v.Settling || len(o.written) != 1 || o.written[0].PayBy != deadline {
		t.Fatalf("early pay: %+v %v, wrote %v", v, err, o.written)
	}
	// The INSERT met a row (the saga's, written meanwhile): the conditional
	// update decides on it; still no wake for a paid QUEUED row.
	o.dups = map[string]bool{"Q0": true}
	o.row, o.changed, o.err = store.Order{OrderID: "Q0", UserID: 100, ItemID: 3, Status: order.StatusQueued, PayBy: deadline, PaidAt: &time.Time{}}, true, nil
	if v, err := d.Pay(context.Background(), "Q0", 100, time.Now()); err != nil || !v.Settling || o.updates != 1 || len(o.written) != 1 {
		t.Fatalf("pay after the INSERT met a row: %+v %v, %d updates, wrote %v", v, err, o.updates, o.written)
	}
	// It met the buyer's other order of the item: no row of its own, 409.
	o.err = order.ErrNotFound
	if _, err := d.Pay(context.Background(), "Q0", 100, time.Now()); !errors.Is(err, order.ErrNotPayable) || len(o.written) != 1 {
		t.Fatalf("pay of a buyer holding another order: %v, wrote %v", err, o.written)
	}
	if n := st.published(); n != 2 {
		t.Fatalf("published %d views, want 2", n)
	}
	// Positive signal that the wake queue is drained: a wake sent after
	// them arrives first and alone.
	o.row, o.changed, o.err = store.Order{OrderID: "P1", UserID: 7, ItemID: 3, Status: order.StatusPaid, PayBy: deadline}, true, nil
	if _, err := d.Pay(context.Background(), "P1", 7, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := <-sg.signals; got != workflows.SignalPay+" P1" {
		t.Fatalf("woke %q, want only P1's saga", got)
	}
}

// A batch whose INSERT fails (MySQL away) answers each of its pays with the
// error, publishes nothing, and the door keeps deciding the next batches.
func TestEarlyPayBatchFailureIsAnswered(t *testing.T) {
	rd := queued(2, payBy())
	down := errors.New("mysql away")
	o, st := &fakeOrders{insertErr: down}, &fakeStatuses{}
	d, _ := newDesk(t, o, st, rd, &fakeSagas{signals: make(chan string, 2)}, payment.Options{})
	if _, err := d.Pay(context.Background(), "Q0", 100, time.Now()); !errors.Is(err, down) {
		t.Fatalf("pay while MySQL is away: %v, want %v", err, down)
	}
	o.mu.Lock()
	o.insertErr = nil
	o.mu.Unlock()
	if v, err := d.Pay(context.Background(), "Q1", 101, time.Now()); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("pay once MySQL is back: %+v %v", v, err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.empty != 0 || len(st.got) != 1 {
		t.Fatalf("published %d views and %d empty batches; want 1 view, no empty batch", len(st.got), st.empty)
	}
}

// Buyers paying at once share the door's batches: while MaxBatches INSERTs
// are held, every pay that arrives waits for the next batch, which writes
// them all in one INSERT. A second pay of one order in the batch is decided
// by the row the first writes; an order whose INSERT meets a row (dups)
// makes the others of its batch try alone, and is decided by its row.
func TestEarlyPaysAreBatched(t *testing.T) {
	const n, held = 20, payment.MaxBatches
	rd := queued(n, payBy())
	o, st := &fakeOrders{gate: make(chan struct{}), row: store.Order{Status: order.StatusPaid}}, &fakeStatuses{}
	d, _ := newDesk(t, o, st, rd, &fakeSagas{signals: make(chan string, n)}, payment.Options{})
	errs := make(chan error, n+1)
	pay := func(i int) {
		_, err := d.Pay(context.Background(), fmt.Sprintf("Q%d", i), int64(100+i), time.Now())
		errs <- err
	}
	run := func(first int) {
		o.gate = make(chan struct{})
		for i := first; i < first+held; i++ {
			go pay(i)
			for d.Waiting() != 0 || d.Runners() != i-first+1 { // its batch taken, the INSERT held
				runtime.Gosched()
			}
		}
		go pay(first + held) // twice, in one batch
		for i := first + held; i < first+n/2; i++ {
			go pay(i)
		}
		for d.Waiting() != n/2-held+1 {
			runtime.Gosched()
		}
		close(o.gate)
		for range n/2 + 1 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
	}
	// sizes are the INSERTs' rows: held ones, then the batch's.
	sizes := func() string {
		s := slices.Clone(o.inserts)
		slices.Sort(s)
		return fmt.Sprint(s)
	}
	ones := func(k int) []int { return slices.Repeat([]int{1}, k) }
	big := n/2 - held
	run(0)
	o.mu.Lock()
	if want := fmt.Sprint(append(ones(held), big)); sizes() != want || len(o.written) != n/2 || o.updates != 1 {
		t.Fatalf("INSERTs of %v rows, %d written, %d updates; want %s, %d, 1", o.inserts, len(o.written), o.updates, want, n/2)
	}
	o.inserts, o.written, o.updates, o.dups = nil, nil, 0, map[string]bool{fmt.Sprintf("Q%d", n-2): true}
	o.mu.Unlock()
	run(n / 2)
	o.mu.Lock()
	defer o.mu.Unlock()
	if want := fmt.Sprint(append(ones(held+big), big)); sizes() != want || len(o.written) != n/2-1 || o.updates != 2 {
		t.Fatalf("INSERTs of %v rows, %d written, %d updates; want %s, %d, 2", o.inserts, len(o.written), o.updates, want, n/2-1)
	}
	if got := st.published(); got != n-1 {
		t.Fatalf("published %d views, want %d", got, n-1)
	}
}
