package compensation_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// fakeStore is an in-memory twin of store.Store's contract for the
// compensations: CloseOrder leaves a PAID or final row as it is and restores
// the stock-row unit once. findErr and closeErr stand for a database outage.
type fakeStore struct {
	mu        sync.Mutex
	row       store.Order // OrderID "": no row
	restored  bool        // the stock-row unit went back
	restores  int         // how many times it went back (must stay <= 1)
	findErr   error
	closeErr  error
	restoreOK bool // the order took a stock-row unit (a deduction marker)
}

func (f *fakeStore) CloseOrder(_ context.Context, o store.Order, c store.Closing) (store.CloseResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closeErr != nil {
		return store.CloseResult{}, f.closeErr
	}
	if f.row.OrderID == "" {
		f.row = store.Order{OrderID: o.OrderID, UserID: o.UserID, ItemID: o.ItemID, Status: c.Status, Reason: c.Reason}
		return store.CloseResult{Order: f.row, Recorded: true}, nil
	}
	if f.row.Status.Final() { // PAID wins; a closed row stays as it is
		return store.CloseResult{Order: f.row, Recorded: true}, nil
	}
	f.row.Status, f.row.Reason = c.Status, c.Reason
	return store.CloseResult{Order: f.row, Restored: f.restore(), Recorded: true}, nil
}

func (f *fakeStore) restore() bool {
	if !f.restoreOK || f.restored || f.row.Status == order.StatusPaid {
		return false
	}
	f.restored = true
	f.restores++
	return true
}

func (f *fakeStore) FindOrder(context.Context, string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.findErr != nil {
		return store.Order{}, f.findErr
	}
	if f.row.OrderID == "" {
		return store.Order{}, order.ErrNotFound
	}
	return f.row, nil
}

// fakeUnits is the Redis side: a reservation that a release puts back on
// sale (left + 1) and a retire removes, each only while it exists, as the
// release script does. err stands for Redis being down.
type fakeUnits struct {
	mu       sync.Mutex
	reserved bool
	left     int64
	calls    int // Release and Retire calls, effective or not
	err      error
}

func reservedUnit() *fakeUnits { return &fakeUnits{reserved: true} }

func (f *fakeUnits) Release(context.Context, int64, string) (bool, error) { return f.giveBack(1) }
func (f *fakeUnits) Retire(context.Context, int64, string) (bool, error)  { return f.giveBack(0) }

// giveBack ends the reservation once, putting units back on sale.
func (f *fakeUnits) giveBack(units int64) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.err != nil || !f.reserved {
		return false, f.err
	}
	f.reserved = false
	f.left += units
	return true, nil
}

func (f *fakeUnits) PublishStatus(context.Context, order.View) error { return nil }

type count struct {
	mu sync.Mutex
	n  int
}

func (c *count) Inc() { c.mu.Lock(); c.n++; c.mu.Unlock() }

var (
	_ compensation.Store = (*fakeStore)(nil)
	_ compensation.Units = (*fakeUnits)(nil)
)

func env(st *fakeStore, u *fakeUnits, c *count) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	e := s.NewTestActivityEnvironment()
	e.RegisterActivity(compensation.New(st, u, c, c))
	return e
}

// The activities are executed by their registered names.
const (
	releaseUnit = "ReleaseUnit"
	retireUnit  = "RetireUnit"
	closeOrder  = "CloseOrder"
)

var (
	in      = compensation.ReleaseInput{OrderID: "O1", ItemID: 1}
	cancel  = compensation.CloseInput{OrderID: "O1", ItemID: 1, UserID: 7, Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}
	paidRow = store.Order{OrderID: "O1", ItemID: 1, UserID: 7, Status: order.StatusPaid}
	openRow = store.Order{OrderID: "O1", ItemID: 1, UserID: 7, Status: order.StatusPendingPayment}
)

func run[T any](t *testing.T, e *testsuite.TestActivityEnvironment, name string, arg any) T {
	t.Helper()
	var out T
	v, err := e.ExecuteActivity(name, arg)
	if err == nil {
		err = v.Get(&out)
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// A PAID order's unit is never given back, whoever asks and in whatever
// order: not released in Redis, not restored on the stock row, not retired
// by CloseOrder.
func TestPaidOrderKeepsItsUnit(t *testing.T) {
	st, u := &fakeStore{row: paidRow, restoreOK: true}, reservedUnit()
	e := env(st, u, &count{})
	if released := run[bool](t, e, releaseUnit, in); released {
		t.Fatal("ReleaseUnit reported a PAID order's unit released")
	}
	res := run[compensation.CloseResult](t, e, closeOrder, cancel)
	if res.Order.Status != order.StatusPaid || res.Restored {
		t.Fatalf("CloseOrder on a PAID order: %+v, want PAID and nothing restored", res)
	}
	if u.calls != 0 || !u.reserved || u.left != 0 || st.restores != 0 {
		t.Fatalf("Redis calls %d, reserved %v, left %d, stock-row restores %d: want the unit untouched",
			u.calls, u.reserved, u.left, st.restores)
	}
}

// The pay wins the race with the close (the row turned PAID between the
// saga's decision and the release): ReleaseUnit reads the row again and
// keeps the unit.
func TestReleaseUnitReadsTheRowItself(t *testing.T) {
	st, u := &fakeStore{row: openRow}, reservedUnit()
	e := env(st, u, &count{})
	st.row.Status = order.StatusPaid // paid at the door after the saga decided to cancel
	if run[bool](t, e, releaseUnit, in) || u.calls != 0 {
		t.Fatalf("released a unit paid meanwhile (Redis calls %d)", u.calls)
	}
}

// When the row cannot be read, nothing is released and the error is retried:
// an outage must not look like "not PAID".
func TestReleaseUnitWithoutTheRowReleasesNothing(t *testing.T) {
	u := reservedUnit()
	_, err := env(&fakeStore{row: paidRow, findErr: errors.New("connection refused")}, u, &count{}).ExecuteActivity(releaseUnit, in)
	retryable(t, err)
	if u.calls != 0 {
		t.Fatalf("Redis called %d times without the order row", u.calls)
	}
}

// Each compensation run twice (a retry after a lost reply, or the saga and a
// repair both closing) has the effect of running it once.
func TestCompensationsTwiceActLikeOnce(t *testing.T) {
	st, u, c := &fakeStore{row: openRow, restoreOK: true}, reservedUnit(), &count{}
	e := env(st, u, c)
	first := run[compensation.CloseResult](t, e, closeOrder, cancel)
	second := run[compensation.CloseResult](t, e, closeOrder, cancel)
	if first.Order.Status != order.StatusCancelled || !first.Restored || second.Restored || second.Order.Status != order.StatusCancelled {
		t.Fatalf("CloseOrder twice: %+v then %+v, want CANCELLED, restored once", first, second)
	}
	if st.restores != 1 {
		t.Fatalf("stock-row unit restored %d times, want once", st.restores)
	}
	if !run[bool](t, e, releaseUnit, in) || run[bool](t, e, releaseUnit, in) {
		t.Fatal("ReleaseUnit twice: want released, then nothing to release")
	}
	if u.left != 1 {
		t.Fatalf("Redis stock up by %d after two releases, want 1", u.left)
	}

	// A phantom unit retired twice is counted once.
	u, c = reservedUnit(), &count{}
	e = env(&fakeStore{}, u, c)
	if !run[bool](t, e, retireUnit, in) || run[bool](t, e, retireUnit, in) {
		t.Fatal("RetireUnit twice: want retired, then nothing to retire")
	}
	if c.n != 1 || u.left != 0 {
		t.Fatalf("retired counted %d, Redis stock up by %d: want counted once, not put back on sale", c.n, u.left)
	}
}

// An order the buyer never got a row for (the saga failed before
// PersistOrder) still gets its Redis unit back.
func TestReleaseUnitWithoutARowReleases(t *testing.T) {
	u := reservedUnit()
	if !run[bool](t, env(&fakeStore{}, u, &count{}), releaseUnit, in) || u.left != 1 {
		t.Fatalf("unit of an order without a row: left %d, want released", u.left)
	}
}

// Compensations are retried until they succeed: none of their errors is
// non-retryable; a timeout close before the deadline (clock skew) is the
// retryable NOT_DUE with its own short delay.
func TestCompensationErrorsAreRetryable(t *testing.T) {
	down := errors.New("connection refused")
	e := env(&fakeStore{closeErr: store.ErrNotDue}, reservedUnit(), &count{})
	_, err := e.ExecuteActivity(closeOrder, compensation.CloseInput{OrderID: "O1",
		Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout, Timeout: true})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != compensation.ErrTypeNotDue || appErr.NonRetryable() {
		t.Fatalf("err %v, want retryable %s", err, compensation.ErrTypeNotDue)
	}
	for name, e := range map[string]*testsuite.TestActivityEnvironment{
		closeOrder:  env(&fakeStore{closeErr: down}, reservedUnit(), &count{}),
		releaseUnit: env(&fakeStore{}, &fakeUnits{reserved: true, err: down}, &count{}),
		retireUnit:  env(&fakeStore{}, &fakeUnits{reserved: true, err: down}, &count{}),
	} {
		t.Run(name, func(t *testing.T) {
			var arg any = in
			if name == closeOrder {
				arg = cancel
			}
			_, err := e.ExecuteActivity(name, arg)
			retryable(t, err)
		})
	}
}

func retryable(t *testing.T, err error) {
	t.Helper()
	var app *temporal.ApplicationError
	if err == nil || (errors.As(err, &app) && app.NonRetryable()) {
		t.Fatalf("err %v, want a retryable error", err)
	}
}
