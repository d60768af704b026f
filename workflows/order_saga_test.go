package workflows

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
)

var testIn = Input{Message: order.Message{OrderID: "01TESTORDER", ItemID: 42, UserID: 1001,
	ReservedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}

const testWindow = 900 // seconds

var testRef = activities.OrderRef{OrderID: testIn.OrderID, ItemID: testIn.ItemID, UserID: testIn.UserID}

// testPayBy is the deadline DecrementStock returns: the test environment's
// clock starts at testIn.ReservedAt.
var testPayBy = testIn.ReservedAt.Add(testWindow * time.Second)

// calls records the order in which mocked steps ran.
type calls struct {
	mu    sync.Mutex
	names []string
}

func (c *calls) add(name string) func(mock.Arguments) {
	return func(mock.Arguments) {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.names = append(c.names, name)
	}
}

func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

func newEnv(t *testing.T) (*testsuite.TestWorkflowEnvironment, *calls) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetStartTime(testIn.ReservedAt)

	env.RegisterWorkflowWithOptions(OrderSaga, workflow.RegisterOptions{Name: WorkflowType})
	// Real structs with no dependencies: an unmocked call panics and fails the test.
	env.RegisterActivity(activities.New(nil, nil, nil))
	env.RegisterActivity(compensation.New(nil, nil, nil, nil))
	return env, &calls{}
}

func view(status order.Status, reason string) order.View {
	v := order.View{OrderID: testIn.OrderID, ItemID: testIn.ItemID, UserID: testIn.UserID, Status: status, Reason: reason,
		CreatedAt: testIn.ReservedAt, UpdatedAt: testIn.ReservedAt}
	if status != order.StatusQueued {
		payBy := testPayBy
		v.PayBy = &payBy
	}
	return v
}

func withStatus(s order.Status) any {
	return mock.MatchedBy(func(v order.View) bool { return v.Status == s })
}

var testDeduct = activities.DeductInput{OrderRef: testRef, PaymentTimeoutSeconds: testWindow}

// mockForward mocks the three forward steps succeeding.
func mockForward(env *testsuite.TestWorkflowEnvironment, c *calls) {
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
		Return(activities.PersistResult{Order: view(order.StatusQueued, ""), PaymentTimeoutSeconds: testWindow}, nil).
		Once().Run(c.add("PersistOrder"))
	env.OnActivity(acts.DecrementStock, mock.Anything, testDeduct).Return(view(order.StatusPendingPayment, ""), nil).
		Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once().Run(c.add("Notify"))
}

// mockClose mocks CloseOrder asked for status and reason (reason "" = any)
// and answering with the row as rowStatus/rowReason, then the unit step (if
// not "") and the final Notify of the row's status, each exactly once.
func mockClose(env *testsuite.TestWorkflowEnvironment, c *calls, status order.Status, reason string, timeout bool,
	rowStatus order.Status, rowReason, unit string) {
	env.OnActivity(comp.CloseOrder, mock.Anything, mock.MatchedBy(func(in compensation.CloseInput) bool {
		return in.OrderID == testIn.OrderID && in.Status == status && (reason == "" || in.Reason == reason) && in.Timeout == timeout
	})).Return(func(_ context.Context, in compensation.CloseInput) (compensation.CloseResult, error) {
		r := rowReason
		if r == "" && rowStatus == in.Status {
			r = in.Reason
		}
		return compensation.CloseResult{Order: view(rowStatus, r), Restored: rowStatus != order.StatusPaid, Recorded: true}, nil
	}).Once().Run(c.add("CloseOrder"))
	in := compensation.ReleaseInput{OrderID: testIn.OrderID, ItemID: testIn.ItemID}
	switch unit {
	case "ReleaseUnit":
		env.OnActivity(comp.ReleaseUnit, mock.Anything, in).Return(true, nil).Once().Run(c.add(unit))
	case "RetireUnit":
		env.OnActivity(comp.RetireUnit, mock.Anything, in).Return(true, nil).Once().Run(c.add(unit))
	}
	env.OnActivity(acts.Notify, mock.Anything, withStatus(rowStatus)).Return(nil).Once().Run(c.add("Notify:" + string(rowStatus)))
}

func equal(t *testing.T, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("steps %v, want %v", got, want)
		}
	}
}

func result(t *testing.T, env *testsuite.TestWorkflowEnvironment) order.View {
	t.Helper()
	if !env.IsWorkflowCompleted() {
		t.Fatal("workflow not completed")
	}
	var res order.View
	if err := env.GetWorkflowResult(&res); err != nil && env.GetWorkflowError() == nil {
		t.Fatalf("result: %v", err)
	}
	return res
}

// ended checks that the workflow completed without error, as status (and
// reason, unless empty), after exactly the steps want with every mock used.
func ended(t *testing.T, env *testsuite.TestWorkflowEnvironment, c *calls, status order.Status, reason string, want ...string) order.View {
	t.Helper()
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	res := result(t, env)
	if res.Status != status || reason != "" && res.Reason != reason {
		t.Fatalf("result %+v, want %s %s", res, status, reason)
	}
	equal(t, c.list(), want)
	env.AssertExpectations(t)
	return res
}

func queryStatus(t *testing.T, env *testsuite.TestWorkflowEnvironment) order.Status {
	t.Helper()
	v, err := env.QueryWorkflow(QueryStatus)
	if err != nil {
		t.Errorf("query: %v", err)
		return ""
	}
	var st order.View
	_ = v.Get(&st)
	return st.Status
}

func signal(env *testsuite.TestWorkflowEnvironment, name string, after time.Duration) {
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(name, nil) }, after)
}

func TestOrderSagaPaid(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Once().Run(c.add("MarkPaid"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once().Run(c.add("Notify:PAID"))
	env.RegisterDelayedCallback(func() {
		if st := queryStatus(t, env); st != order.StatusPendingPayment {
			t.Errorf("status before pay = %s", st)
		}
		env.SignalWorkflow(SignalPay, nil)
	}, time.Minute)
	env.ExecuteWorkflow(WorkflowType, testIn)
	res := ended(t, env, c, order.StatusPaid, "", "PersistOrder", "DecrementStock", "Notify", "MarkPaid", "Notify:PAID")
	if res.PayBy == nil || !res.PayBy.Equal(testPayBy) {
		t.Fatalf("result %+v, want pay_by %s", res, testPayBy)
	}
}

// The window closes at the row's deadline plus the grace, not before; the
// timeout close is asked to check the deadline on the database.
func TestOrderSagaTimeoutCompensatesOnce(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.RegisterDelayedCallback(func() {
		if st := queryStatus(t, env); st != order.StatusPendingPayment {
			t.Errorf("status just before deadline+grace = %s, want still PENDING_PAYMENT", st)
		}
	}, testWindow*time.Second+order.PayGrace-time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)

	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout, "PersistOrder", "DecrementStock", "Notify", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// The buyer paid at the door in time but the saga was never woken (Temporal
// unreachable): at the deadline it finds the row PAID, gives nothing back
// and ends PAID.
func TestOrderSagaTimeoutFindsPaymentRecordedAtTheDoor(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusPaid, "", "")
	env.ExecuteWorkflow(WorkflowType, testIn)
	ended(t, env, c, order.StatusPaid, "", "PersistOrder", "DecrementStock", "Notify", "CloseOrder", "Notify:PAID")
}

func TestOrderSagaBuyerCancel(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockClose(env, c, order.StatusCancelled, order.ReasonBuyerCancelled, false, order.StatusCancelled, "", "ReleaseUnit")
	signal(env, SignalCancel, 10*time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)
	ended(t, env, c, order.StatusCancelled, order.ReasonBuyerCancelled, "PersistOrder", "DecrementStock", "Notify", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// A pay signal for an order whose row was cancelled at the door: the row
// wins, the order is compensated with its own status.
func TestOrderSagaPaySignalForCancelledRow(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	notPayable := temporal.NewNonRetryableApplicationError("order is CANCELLED", order.ReasonNotPayable, nil,
		view(order.StatusCancelled, order.ReasonBuyerCancelled))
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(order.View{}, notPayable).Once().Run(c.add("MarkPaid"))
	mockClose(env, c, order.StatusCancelled, order.ReasonBuyerCancelled, false, order.StatusCancelled, "", "ReleaseUnit")
	signal(env, SignalPay, time.Minute)
	env.ExecuteWorkflow(WorkflowType, testIn)
	ended(t, env, c, order.StatusCancelled, "", "PersistOrder", "DecrementStock", "Notify", "MarkPaid", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// Business outcomes of the forward steps fail the order, compensated; a
// stock row without the unit retires the Redis reservation instead of
// putting a phantom unit back on sale.
func TestOrderSagaBusinessFailures(t *testing.T) {
	stockErr := temporal.NewNonRetryableApplicationError("item 42: stock row exhausted", order.ReasonStockExhausted, nil)
	dupErr := temporal.NewNonRetryableApplicationError("buyer already has another order", order.ReasonDuplicateOrder, nil)
	cases := []struct {
		name       string
		setup      func(env *testsuite.TestWorkflowEnvironment, c *calls)
		reasonType string
		want       []string
	}{{
		name: "PersistOrder",
		setup: func(env *testsuite.TestWorkflowEnvironment, c *calls) {
			env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(activities.PersistResult{}, dupErr).Once().Run(c.add("PersistOrder"))
			mockClose(env, c, order.StatusFailed, "", false, order.StatusFailed, "", "ReleaseUnit")
		},
		reasonType: order.ReasonDuplicateOrder,
		want:       []string{"PersistOrder", "CloseOrder", "ReleaseUnit", "Notify:FAILED"},
	}, {
		name: "DecrementStock",
		setup: func(env *testsuite.TestWorkflowEnvironment, c *calls) {
			env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
				Return(activities.PersistResult{Order: view(order.StatusQueued, ""), PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
			env.OnActivity(acts.DecrementStock, mock.Anything, testDeduct).Return(order.View{}, stockErr).Once().Run(c.add("DecrementStock"))
			mockClose(env, c, order.StatusFailed, "", false, order.StatusFailed, "", "RetireUnit")
		},
		reasonType: order.ReasonStockExhausted,
		want:       []string{"PersistOrder", "DecrementStock", "CloseOrder", "RetireUnit", "Notify:FAILED"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, c := newEnv(t)
			tc.setup(env, c)
			env.ExecuteWorkflow(WorkflowType, testIn)
			err := env.GetWorkflowError()
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) || appErr.Type() != tc.reasonType {
				t.Fatalf("workflow error %v, want type %s", err, tc.reasonType)
			}
			equal(t, c.list(), tc.want)
			env.AssertExpectations(t)
		})
	}
}

// An order decided elsewhere (the row already final) keeps its status; the
// saga still makes sure its units are back, and does not fail.
func TestOrderSagaOrderClosedElsewhere(t *testing.T) {
	env, c := newEnv(t)
	closed := temporal.NewNonRetryableApplicationError("order is already CANCELLED", order.ReasonOrderClosed, nil,
		view(order.StatusCancelled, order.ReasonBuyerCancelled))
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(activities.PersistResult{}, closed).Once().Run(c.add("PersistOrder"))
	mockClose(env, c, order.StatusFailed, "", false, order.StatusCancelled, order.ReasonBuyerCancelled, "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, testIn)
	ended(t, env, c, order.StatusCancelled, "", "PersistOrder", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// Outages delay orders, never fail them: transient errors are retried
// locally, then (past the local budget) as a regular activity without limit;
// a Notify that never succeeds is logged and skipped.
func TestOrderSagaOutagesOnlyDelay(t *testing.T) {
	env, c := newEnv(t)
	down := errors.New("dial tcp 127.0.0.1:3306: connect: connection refused")
	var persists, deducts atomic.Int64
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(func(context.Context, activities.OrderRef) (activities.PersistResult, error) {
		if persists.Add(1) <= 3 {
			return activities.PersistResult{}, down
		}
		return activities.PersistResult{Order: view(order.StatusQueued, ""), PaymentTimeoutSeconds: testWindow}, nil
	})
	// More failures than fit in the local budget (~11 attempts in 30 s): the
	// step continues as a regular activity and still succeeds. (The test
	// environment caps "unlimited" retries of a regular activity at 10.)
	env.OnActivity(acts.DecrementStock, mock.Anything, testDeduct).Return(func(context.Context, activities.DeductInput) (order.View, error) {
		if deducts.Add(1) <= 13 {
			return order.View{}, down
		}
		return view(order.StatusPendingPayment, ""), nil
	})
	env.OnActivity(acts.Notify, mock.Anything, mock.Anything).Return(errors.New("redis: connection refused"))
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Once().Run(c.add("MarkPaid"))
	signal(env, SignalPay, 10*time.Minute)
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if res := result(t, env); res.Status != order.StatusPaid {
		t.Fatalf("result %+v", res)
	}
	// ≥, not =: the test environment judges a local attempt's deadline on
	// its skipping clock, so under load a successful attempt can be counted
	// as timed out and run once more (activities are idempotent for this).
	if persists.Load() < 4 || deducts.Load() < 14 {
		t.Fatalf("PersistOrder ran %d times, DecrementStock %d; want ≥ 4 and ≥ 14", persists.Load(), deducts.Load())
	}
	env.AssertExpectations(t)
}

// A compensation that keeps failing is retried until it succeeds.
func TestOrderSagaCompensationRetriedUntilItSucceeds(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	var closes atomic.Int64
	env.OnActivity(comp.CloseOrder, mock.Anything, mock.Anything).Return(func(_ context.Context, in compensation.CloseInput) (compensation.CloseResult, error) {
		if closes.Add(1) <= 16 {
			return compensation.CloseResult{}, errors.New("mysql down")
		}
		return compensation.CloseResult{Order: view(order.StatusCancelled, in.Reason), Restored: true, Recorded: true}, nil
	})
	env.OnActivity(comp.ReleaseUnit, mock.Anything, mock.Anything).Return(true, nil).Once()
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusCancelled)).Return(nil).Once()
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if res := result(t, env); res.Status != order.StatusCancelled || closes.Load() < 17 { // ≥: see TestOrderSagaOutagesOnlyDelay
		t.Fatalf("result %+v after %d CloseOrder calls", res, closes.Load())
	}
	env.AssertExpectations(t)
}

// An operator's workflow cancel compensates in a disconnected context; a
// paid row is left alone.
func TestOrderSagaWorkflowCancel(t *testing.T) {
	for _, tc := range []struct {
		row  order.Status
		unit string
		want []string
	}{
		{order.StatusCancelled, "ReleaseUnit", []string{"PersistOrder", "DecrementStock", "Notify", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED"}},
		{order.StatusPaid, "", []string{"PersistOrder", "DecrementStock", "Notify", "CloseOrder", "Notify:PAID"}},
	} {
		t.Run(string(tc.row), func(t *testing.T) {
			env, c := newEnv(t)
			mockForward(env, c)
			mockClose(env, c, order.StatusCancelled, order.ReasonOperatorCancelled, false, tc.row, "", tc.unit)
			env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
			env.ExecuteWorkflow(WorkflowType, testIn)
			err := env.GetWorkflowError()
			if tc.row == order.StatusPaid && err != nil || tc.row != order.StatusPaid && !temporal.IsCanceledError(err) {
				t.Fatalf("workflow error %v", err)
			}
			equal(t, c.list(), tc.want)
			env.AssertExpectations(t)
		})
	}
}

// A pay signal that arrives before the order is pending is kept and taken
// once it is.
func TestOrderSagaEarlyPaySignalKept(t *testing.T) {
	env, c := newEnv(t)
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
		Return(activities.PersistResult{Order: view(order.StatusQueued, ""), PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
	env.OnActivity(acts.DecrementStock, mock.Anything, testDeduct).After(3*time.Second).Return(view(order.StatusPendingPayment, ""), nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once()
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Once().Run(c.add("MarkPaid"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once()
	signal(env, SignalPay, time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "MarkPaid"})
	env.AssertExpectations(t)
}
