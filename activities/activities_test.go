package activities_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// fakeStore is an in-memory twin of store.Store's contract for the forward
// steps: CreateQueuedOrder is idempotent on the order id, DeductStock takes a
// unit once per order (a deduction marker), ConfirmPaid accepts a PAID row only.
// err, when set, is returned by every call (a database outage).
type fakeStore struct {
	mu       sync.Mutex
	items    map[int64]store.Item
	stock    map[int64]int64
	rows     map[string]store.Order
	deducted map[string]bool
	err      error
}

func newStore() *fakeStore {
	return &fakeStore{
		items:    map[int64]store.Item{1: {ID: 1, PaymentTimeoutSeconds: 900}},
		stock:    map[int64]int64{1: 3},
		rows:     map[string]store.Order{},
		deducted: map[string]bool{},
	}
}

func (f *fakeStore) GetItem(_ context.Context, id int64) (store.Item, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Item{}, f.err
	}
	it, ok := f.items[id]
	if !ok {
		return store.Item{}, order.ErrItemNotFound
	}
	return it, nil
}

func (f *fakeStore) CreateQueuedOrder(_ context.Context, o store.Order) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Order{}, f.err
	}
	if row, ok := f.rows[o.OrderID]; ok {
		return row, nil
	}
	for _, row := range f.rows {
		if row.UserID == o.UserID && row.ItemID == o.ItemID {
			return store.Order{}, fmt.Errorf("buyer %d holds %s: %w", o.UserID, row.OrderID, store.ErrDuplicate)
		}
	}
	o.Status = order.StatusQueued
	f.rows[o.OrderID] = o
	return o, nil
}

func (f *fakeStore) DeductStock(_ context.Context, orderID string, itemID int64, window time.Duration) (store.Order, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Order{}, false, f.err
	}
	row, ok := f.rows[orderID]
	if ok && row.Status.Final() {
		return row, false, store.ErrOrderClosed
	}
	if f.deducted[orderID] {
		return row, false, nil
	}
	left, ok := f.stock[itemID]
	if !ok {
		return store.Order{}, false, order.ErrItemNotFound
	}
	if left == 0 {
		return store.Order{}, false, store.ErrStockExhausted
	}
	f.stock[itemID] = left - 1
	f.deducted[orderID] = true
	payBy := time.Now().Add(window)
	row.Status, row.PayBy = order.StatusPendingPayment, &payBy
	f.rows[orderID] = row
	return row, true, nil
}

func (f *fakeStore) ConfirmPaid(_ context.Context, orderID string) (store.Order, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return store.Order{}, f.err
	}
	row, ok := f.rows[orderID]
	switch {
	case !ok:
		return store.Order{}, order.ErrNotFound
	case row.Status == order.StatusPaid:
		return row, nil
	default:
		return row, order.ErrNotPayable
	}
}

type fakeStatus struct {
	mu        sync.Mutex
	published []order.View
	err       error
}

func (f *fakeStatus) PublishStatus(_ context.Context, v order.View) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.published = append(f.published, v)
	return nil
}

type observer struct {
	mu sync.Mutex
	n  int
}

func (o *observer) Observe(float64) { o.mu.Lock(); o.n++; o.mu.Unlock() }

var _ activities.OrderStore = (*fakeStore)(nil)

func env(st *fakeStore, status *fakeStatus, obs *observer) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	e := s.NewTestActivityEnvironment()
	e.RegisterActivity(activities.New(st, status, obs))
	return e
}

// The workflow calls the activities by their registered names.
const (
	persistOrder   = "PersistOrder"
	decrementStock = "DecrementStock"
	notify         = "Notify"
	markPaid       = "MarkPaid"
)

var ref = activities.OrderRef{OrderID: order.NewID(), ItemID: 1, UserID: 42}

// permanent fails unless err is a non-retryable application error of the type.
func permanent(t *testing.T, err error, reason string) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != reason || !app.NonRetryable() {
		t.Fatalf("err %v, want a non-retryable %s", err, reason)
	}
	return app
}

// retryable fails unless err is there and is no non-retryable application
// error: the saga retries it.
func retryable(t *testing.T, err error) {
	t.Helper()
	var app *temporal.ApplicationError
	if err == nil || (errors.As(err, &app) && app.NonRetryable()) {
		t.Fatalf("err %v, want a retryable error", err)
	}
}

// Each forward step run twice (a retry after a lost reply) has the effect of
// running it once: one row, one unit off the stock row, one latency
// observation, the same answers.
func TestForwardStepsTwiceActLikeOnce(t *testing.T) {
	st, status, obs := newStore(), &fakeStatus{}, &observer{}
	e := env(st, status, obs)
	var first, second activities.PersistResult
	for i, res := range []*activities.PersistResult{&first, &second} {
		v, err := e.ExecuteActivity(persistOrder, ref)
		if err != nil {
			t.Fatalf("PersistOrder run %d: %v", i+1, err)
		}
		if err := v.Get(res); err != nil {
			t.Fatal(err)
		}
	}
	if len(st.rows) != 1 || first.Order.Status != order.StatusQueued || second != first || first.PaymentTimeoutSeconds != 900 {
		t.Fatalf("PersistOrder twice: rows %d, answers %+v and %+v", len(st.rows), first, second)
	}

	in := activities.DeductInput{OrderRef: ref, PaymentTimeoutSeconds: first.PaymentTimeoutSeconds}
	var views [2]order.View
	for i := range views {
		v, err := e.ExecuteActivity(decrementStock, in)
		if err != nil {
			t.Fatalf("DecrementStock run %d: %v", i+1, err)
		}
		if err := v.Get(&views[i]); err != nil {
			t.Fatal(err)
		}
	}
	if st.stock[1] != 2 {
		t.Fatalf("stock row %d after two DecrementStock, want 2", st.stock[1])
	}
	if views[0].Status != order.StatusPendingPayment || views[1].Status != views[0].Status || views[0].PayBy == nil {
		t.Fatalf("DecrementStock answers %+v and %+v, want PENDING_PAYMENT with pay_by", views[0], views[1])
	}
	if obs.n != 1 {
		t.Fatalf("202 -> PENDING_PAYMENT observed %d times, want once", obs.n)
	}

	// A pay signal before the door's write pays nothing (the row decides).
	if _, err := e.ExecuteActivity(markPaid, ref); err == nil {
		t.Fatal("MarkPaid of a PENDING_PAYMENT row succeeded: a signal paid the order")
	}
	row := st.rows[ref.OrderID]
	row.Status = order.StatusPaid // the door's write
	st.rows[ref.OrderID] = row
	for i := range 2 {
		v, err := e.ExecuteActivity(markPaid, ref)
		var paid order.View
		if err == nil {
			err = v.Get(&paid)
		}
		if err != nil || paid.Status != order.StatusPaid {
			t.Fatalf("MarkPaid run %d: %+v %v, want PAID", i+1, paid, err)
		}
	}

	for range 2 {
		if _, err := e.ExecuteActivity(notify, views[0]); err != nil {
			t.Fatal(err)
		}
	}
	if len(status.published) != 2 || !reflect.DeepEqual(status.published[1], status.published[0]) {
		t.Fatalf("published %+v, want the same view twice", status.published)
	}
}

// Business outcomes are final, with the order.Reason* code as the type;
// outages are retried.
func TestErrorClassification(t *testing.T) {
	ctx := context.Background()
	outage := errors.New("dial tcp 127.0.0.1:3306: connection refused")
	cases := []struct {
		name   string
		setup  func(st *fakeStore)
		run    func(e *testsuite.TestActivityEnvironment) error
		reason string // "": retryable
	}{
		{"persist: unknown item", nil, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(persistOrder, activities.OrderRef{OrderID: order.NewID(), ItemID: 99, UserID: 1})
			return err
		}, order.ReasonItemNotFound},
		{"persist: buyer holds another order", func(st *fakeStore) {
			_, _ = st.CreateQueuedOrder(ctx, store.Order{OrderID: order.NewID(), UserID: ref.UserID, ItemID: ref.ItemID})
		}, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(persistOrder, ref)
			return err
		}, order.ReasonDuplicateOrder},
		{"persist: row already final", func(st *fakeStore) {
			st.rows[ref.OrderID] = store.Order{OrderID: ref.OrderID, UserID: ref.UserID, ItemID: ref.ItemID, Status: order.StatusCancelled}
		}, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(persistOrder, ref)
			return err
		}, order.ReasonOrderClosed},
		{"persist: outage", func(st *fakeStore) { st.err = outage }, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(persistOrder, ref)
			return err
		}, ""},
		{"decrement: stock row at zero", func(st *fakeStore) { st.stock[1] = 0 }, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(decrementStock, activities.DeductInput{OrderRef: ref})
			return err
		}, order.ReasonStockExhausted},
		{"decrement: no stock row", nil, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(decrementStock, activities.DeductInput{OrderRef: activities.OrderRef{OrderID: order.NewID(), ItemID: 99}})
			return err
		}, order.ReasonItemNotFound},
		{"decrement: order closed meanwhile", func(st *fakeStore) {
			st.rows[ref.OrderID] = store.Order{OrderID: ref.OrderID, Status: order.StatusCancelled}
		}, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(decrementStock, activities.DeductInput{OrderRef: ref})
			return err
		}, order.ReasonOrderClosed},
		{"decrement: version conflicts", func(st *fakeStore) { st.err = store.ErrVersionConflict }, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(decrementStock, activities.DeductInput{OrderRef: ref})
			return err
		}, ""},
		{"mark paid: cancelled order", func(st *fakeStore) {
			st.rows[ref.OrderID] = store.Order{OrderID: ref.OrderID, Status: order.StatusCancelled}
		}, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(markPaid, ref)
			return err
		}, order.ReasonNotPayable},
		{"mark paid: unknown order", nil, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(markPaid, ref)
			return err
		}, order.ReasonNotPayable},
		{"mark paid: outage", func(st *fakeStore) { st.err = outage }, func(e *testsuite.TestActivityEnvironment) error {
			_, err := e.ExecuteActivity(markPaid, ref)
			return err
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newStore()
			if c.setup != nil {
				c.setup(st)
			}
			err := c.run(env(st, &fakeStatus{}, &observer{}))
			if c.reason == "" {
				retryable(t, err)
				return
			}
			permanent(t, err, c.reason)
		})
	}
}

// ORDER_CLOSED carries the row as it is, so the saga can publish it; a
// close found by DecrementStock without a row still names the order.
func TestOrderClosedCarriesTheRow(t *testing.T) {
	st := newStore()
	st.rows[ref.OrderID] = store.Order{OrderID: ref.OrderID, UserID: ref.UserID, ItemID: ref.ItemID,
		Status: order.StatusCancelled, Reason: order.ReasonBuyerCancelled}
	_, err := env(st, &fakeStatus{}, &observer{}).ExecuteActivity(persistOrder, ref)
	var v order.View
	if err := permanent(t, err, order.ReasonOrderClosed).Details(&v); err != nil {
		t.Fatal(err)
	}
	if v.OrderID != ref.OrderID || v.Status != order.StatusCancelled || v.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("details %+v, want the cancelled row", v)
	}

	// DeductStock reports the close without the row (it vanished): FAILED.
	st = newStore()
	st.err = store.ErrOrderClosed
	_, err = env(st, &fakeStatus{}, &observer{}).ExecuteActivity(decrementStock, activities.DeductInput{OrderRef: ref})
	if err := permanent(t, err, order.ReasonOrderClosed).Details(&v); err != nil {
		t.Fatal(err)
	}
	if v.OrderID != ref.OrderID || v.UserID != ref.UserID || v.Status != order.StatusFailed {
		t.Fatalf("details %+v, want order %s FAILED", v, ref.OrderID)
	}
}

// A failed publish is returned (retried); the saga decides what it means.
func TestNotifyReturnsPublishErrors(t *testing.T) {
	_, err := env(newStore(), &fakeStatus{err: errors.New("redis down")}, &observer{}).
		ExecuteActivity(notify, order.View{OrderID: ref.OrderID})
	retryable(t, err)
}
