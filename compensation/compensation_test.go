package compensation_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

type fakeStore struct {
	row      store.Order
	closeErr error
}

func (f *fakeStore) CloseOrder(_ context.Context, o store.Order, c store.Closing) (store.CloseResult, error) {
	if f.closeErr != nil {
		return store.CloseResult{}, f.closeErr
	}
	return store.CloseResult{Order: store.Order{OrderID: o.OrderID, Status: c.Status, Reason: c.Reason}, Restored: true, Recorded: true}, nil
}
func (f *fakeStore) RestoreStock(context.Context, string) (bool, error) { return true, nil }
func (f *fakeStore) FindOrder(context.Context, string) (store.Order, error) {
	if f.row.OrderID == "" {
		return store.Order{}, store.ErrNotFound
	}
	return f.row, nil
}

type fakeUnits struct{ released, retired atomic.Int64 }

func (f *fakeUnits) Release(context.Context, int64, string) (bool, error) {
	f.released.Add(1)
	return true, nil
}
func (f *fakeUnits) Retire(context.Context, int64, string) (bool, error) {
	f.retired.Add(1)
	return true, nil
}
func (f *fakeUnits) PublishStatus(context.Context, order.View) error { return nil }

type count struct{ n atomic.Int64 }

func (c *count) Inc() { c.n.Add(1) }

func env(st *fakeStore, u *fakeUnits, c *count) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	e := s.NewTestActivityEnvironment()
	e.RegisterActivity(compensation.New(st, u, c))
	return e
}

// The activities are executed by their registered names.
const (
	releaseUnit = "ReleaseUnit"
	retireUnit  = "RetireUnit"
	closeOrder  = "CloseOrder"
)

var in = compensation.ReleaseInput{OrderID: "O1", ItemID: 1}

// A PAID order's unit is never released, whoever asks.
func TestReleaseUnitLeavesPaidOrdersAlone(t *testing.T) {
	u := &fakeUnits{}
	e := env(&fakeStore{row: store.Order{OrderID: "O1", Status: order.StatusPaid}}, u, &count{})
	if _, err := e.ExecuteActivity(releaseUnit, in); err != nil {
		t.Fatal(err)
	}
	if u.released.Load() != 0 {
		t.Fatal("a PAID order's unit was released")
	}
	e = env(&fakeStore{row: store.Order{OrderID: "O1", Status: order.StatusCancelled}}, u, &count{})
	if _, err := e.ExecuteActivity(releaseUnit, in); err != nil || u.released.Load() != 1 {
		t.Fatalf("cancelled order: released %d, err %v", u.released.Load(), err)
	}
}

// A phantom unit is retired, not released, and counted.
func TestRetireUnitCounts(t *testing.T) {
	u, c := &fakeUnits{}, &count{}
	e := env(&fakeStore{}, u, c)
	if _, err := e.ExecuteActivity(retireUnit, in); err != nil {
		t.Fatal(err)
	}
	if u.retired.Load() != 1 || u.released.Load() != 0 || c.n.Load() != 1 {
		t.Fatalf("retired %d released %d counted %d", u.retired.Load(), u.released.Load(), c.n.Load())
	}
}

// A timeout close before the deadline (clock skew) is a retryable NOT_DUE, not a failure.
func TestCloseOrderNotDueIsRetryable(t *testing.T) {
	e := env(&fakeStore{closeErr: store.ErrNotDue}, &fakeUnits{}, &count{})
	_, err := e.ExecuteActivity(closeOrder, compensation.CloseInput{OrderID: "O1",
		Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout, Timeout: true})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != compensation.ErrTypeNotDue || appErr.NonRetryable() {
		t.Fatalf("err %v, want retryable %s", err, compensation.ErrTypeNotDue)
	}
}
