package workflows

import (
	"context"
	"errors"
	"sync"
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

var testIn = Input{OrderID: "01TESTORDER", ItemID: 42, UserID: 1001, ReservedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}

const testWindow = 900 // seconds

var testRef = activities.OrderRef{OrderID: testIn.OrderID, ItemID: testIn.ItemID, UserID: testIn.UserID}

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
	env.RegisterWorkflowWithOptions(OrderSaga, workflow.RegisterOptions{Name: WorkflowType})
	// Real structs with no dependencies: an unmocked call panics and fails the test.
	env.RegisterActivity(activities.New(nil, nil))
	env.RegisterActivity(compensation.New(nil, nil))
	return env, &calls{}
}

func view(status order.Status, reason string) order.View {
	return order.View{OrderID: testIn.OrderID, ItemID: testIn.ItemID, UserID: testIn.UserID, Status: status, Reason: reason,
		CreatedAt: testIn.ReservedAt, UpdatedAt: testIn.ReservedAt}
}

func withStatus(s order.Status) any {
	return mock.MatchedBy(func(v order.View) bool { return v.Status == s })
}

// mockForward mocks the three forward steps succeeding.
func mockForward(env *testsuite.TestWorkflowEnvironment, c *calls) {
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
		Return(activities.PersistResult{Order: view(order.StatusPendingPayment, ""), PaymentTimeoutSeconds: testWindow}, nil).
		Once().Run(c.add("PersistOrder"))
	env.OnActivity(acts.DecrementStock, mock.Anything, testRef).Return(nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once().Run(c.add("Notify"))
}

// mockCompensations mocks the given compensations, each exactly once, and the
// final Notify of status.
func mockCompensations(env *testsuite.TestWorkflowEnvironment, c *calls, status order.Status, reason string, steps ...string) {
	for _, step := range steps {
		switch step {
		case "RestoreStock":
			env.OnActivity(comp.RestoreStock, mock.Anything, compensation.RestoreInput{OrderID: testIn.OrderID}).
				Return(true, nil).Once().Run(c.add(step))
		case "MarkOrder":
			env.OnActivity(comp.MarkOrder, mock.Anything, mock.MatchedBy(func(in compensation.MarkInput) bool {
				return in.OrderID == testIn.OrderID && in.Status == status && (reason == "" || in.Reason == reason)
			})).Return(func(_ context.Context, in compensation.MarkInput) (order.View, error) {
				return view(in.Status, in.Reason), nil
			}).Once().Run(c.add(step))
		case "ReleaseUnit":
			env.OnActivity(comp.ReleaseUnit, mock.Anything, compensation.ReleaseInput{OrderID: testIn.OrderID, ItemID: testIn.ItemID}).
				Return(true, nil).Once().Run(c.add(step))
		}
	}
	env.OnActivity(acts.Notify, mock.Anything, withStatus(status)).Return(nil).Once().Run(c.add("Notify:" + string(status)))
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

// update sends an update from inside the test environment and records what
// came back.
type updateResult struct {
	accepted bool
	rejected error
	view     order.View
	err      error
	done     bool
}

func sendUpdate(env *testsuite.TestWorkflowEnvironment, name string, r *updateResult) {
	env.UpdateWorkflow(name, "", &testsuite.TestUpdateCallback{
		OnAccept: func() { r.accepted = true },
		OnReject: func(err error) { r.rejected = err; r.done = true },
		OnComplete: func(v any, err error) {
			if vv, ok := v.(order.View); ok {
				r.view = vv
			}
			r.err, r.done = err, true
		},
	})
}

func isNotPayable(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == ErrTypeNotPayable
}

func TestOrderSagaHappyPathPaid(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Once().Run(c.add("MarkPaid"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once().Run(c.add("Notify:PAID"))

	var pay updateResult
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryStatus)
		if err != nil {
			t.Errorf("query: %v", err)
		} else {
			var st order.View
			_ = v.Get(&st)
			if st.Status != order.StatusPendingPayment {
				t.Errorf("status before pay = %s", st.Status)
			}
		}
		sendUpdate(env, UpdatePay, &pay)
	}, time.Minute)
	env.ExecuteWorkflow(WorkflowType, testIn)

	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("completed=%v err=%v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	var res order.View
	if err := env.GetWorkflowResult(&res); err != nil || res.Status != order.StatusPaid {
		t.Fatalf("result %+v %v", res, err)
	}
	if !pay.accepted || pay.err != nil || pay.view.Status != order.StatusPaid {
		t.Fatalf("pay update: %+v", pay)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "Notify", "MarkPaid", "Notify:PAID"})
	env.AssertExpectations(t)
}

func TestOrderSagaTimeoutCompensatesEachStepOnce(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCompensations(env, c, order.StatusCancelled, ReasonPaymentTimeout, "RestoreStock", "MarkOrder", "ReleaseUnit")
	var late updateResult
	env.RegisterDelayedCallback(func() { sendUpdate(env, UpdatePay, &late) }, testWindow*time.Second+time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)

	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("completed=%v err=%v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	var res order.View
	_ = env.GetWorkflowResult(&res)
	if res.Status != order.StatusCancelled || res.Reason != ReasonPaymentTimeout {
		t.Fatalf("result %+v", res)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "Notify", "RestoreStock", "MarkOrder", "ReleaseUnit", "Notify:CANCELLED"})
	env.AssertExpectations(t)
}

func TestOrderSagaBuyerCancel(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCompensations(env, c, order.StatusCancelled, ReasonBuyerCancelled, "RestoreStock", "MarkOrder", "ReleaseUnit")
	var cancel updateResult
	env.RegisterDelayedCallback(func() { sendUpdate(env, UpdateCancel, &cancel) }, 10*time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)

	if !env.IsWorkflowCompleted() || env.GetWorkflowError() != nil {
		t.Fatalf("completed=%v err=%v", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if !cancel.accepted || cancel.err != nil || cancel.view.Status != order.StatusCancelled || cancel.view.Reason != ReasonBuyerCancelled {
		t.Fatalf("cancel update: %+v", cancel)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "Notify", "RestoreStock", "MarkOrder", "ReleaseUnit", "Notify:CANCELLED"})
	env.AssertExpectations(t)
}

func TestOrderSagaCancelRejectedOncePaid(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	// MarkPaid takes a while, so the cancel arrives while the payment is being recorded.
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).After(5*time.Second).Return(view(order.StatusPaid, ""), nil).Once()
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once()
	var pay, cancel, payAgain updateResult
	env.RegisterDelayedCallback(func() { sendUpdate(env, UpdatePay, &pay) }, time.Minute)
	env.RegisterDelayedCallback(func() {
		sendUpdate(env, UpdateCancel, &cancel)
		sendUpdate(env, UpdatePay, &payAgain)
	}, time.Minute+time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)

	if pay.err != nil || pay.view.Status != order.StatusPaid {
		t.Fatalf("pay: %+v", pay)
	}
	if !isNotPayable(cancel.rejected) {
		t.Fatalf("cancel after pay: %+v, want rejected ORDER_NOT_PAYABLE", cancel)
	}
	if !payAgain.accepted || payAgain.err != nil || payAgain.view.Status != order.StatusPaid {
		t.Fatalf("second pay: %+v, want PAID", payAgain)
	}
	env.AssertExpectations(t)
}

func TestOrderSagaPermanentFailureCompensatesStepsDone(t *testing.T) {
	stockErr := temporal.NewNonRetryableApplicationError("item 42: stock row exhausted", activities.ReasonStockExhausted, nil)
	dupErr := temporal.NewNonRetryableApplicationError("buyer already has another order", activities.ReasonDuplicateOrder, nil)
	cases := []struct {
		name       string
		setup      func(env *testsuite.TestWorkflowEnvironment, c *calls)
		reasonType string
		want       []string
	}{{
		name: "PersistOrder",
		setup: func(env *testsuite.TestWorkflowEnvironment, c *calls) {
			env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(activities.PersistResult{}, dupErr).Once().Run(c.add("PersistOrder"))
			mockCompensations(env, c, order.StatusFailed, "", "MarkOrder", "ReleaseUnit")
		},
		reasonType: activities.ReasonDuplicateOrder,
		want:       []string{"PersistOrder", "MarkOrder", "ReleaseUnit", "Notify:FAILED"},
	}, {
		name: "DecrementStock",
		setup: func(env *testsuite.TestWorkflowEnvironment, c *calls) {
			env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
				Return(activities.PersistResult{Order: view(order.StatusPendingPayment, ""), PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
			env.OnActivity(acts.DecrementStock, mock.Anything, testRef).Return(stockErr).Once().Run(c.add("DecrementStock"))
			mockCompensations(env, c, order.StatusFailed, "", "MarkOrder", "ReleaseUnit")
		},
		reasonType: activities.ReasonStockExhausted,
		want:       []string{"PersistOrder", "DecrementStock", "MarkOrder", "ReleaseUnit", "Notify:FAILED"},
	}, {
		name: "Notify",
		setup: func(env *testsuite.TestWorkflowEnvironment, c *calls) {
			env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
				Return(activities.PersistResult{Order: view(order.StatusPendingPayment, ""), PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
			env.OnActivity(acts.DecrementStock, mock.Anything, testRef).Return(nil).Once().Run(c.add("DecrementStock"))
			// Redis down: every attempt fails until the bounded retries run out.
			env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(errors.New("redis: connection refused"))
			mockCompensations(env, c, order.StatusFailed, "", "RestoreStock", "MarkOrder", "ReleaseUnit")
		},
		reasonType: "RETRIES_EXHAUSTED",
		want:       []string{"PersistOrder", "DecrementStock", "RestoreStock", "MarkOrder", "ReleaseUnit", "Notify:FAILED"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, c := newEnv(t)
			tc.setup(env, c)
			env.ExecuteWorkflow(WorkflowType, testIn)
			if !env.IsWorkflowCompleted() {
				t.Fatal("workflow not completed")
			}
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

func TestOrderSagaOrderClosedElsewhereCompensatesNothing(t *testing.T) {
	env, c := newEnv(t)
	closed := temporal.NewNonRetryableApplicationError("order is already FAILED", activities.ReasonOrderClosed, nil,
		view(order.StatusFailed, "SAGA_NOT_STARTED"))
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(activities.PersistResult{}, closed).Once().Run(c.add("PersistOrder"))
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res order.View
	_ = env.GetWorkflowResult(&res)
	if res.Status != order.StatusFailed {
		t.Fatalf("result %+v", res)
	}
	equal(t, c.list(), []string{"PersistOrder"})
	env.AssertExpectations(t)
}

func TestOrderSagaTransientFailuresRetried(t *testing.T) {
	env, c := newEnv(t)
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).Return(activities.PersistResult{}, errors.New("mysql: bad connection")).Once().Run(c.add("PersistOrder:err"))
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
		Return(activities.PersistResult{Order: view(order.StatusPendingPayment, ""), PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
	env.OnActivity(acts.DecrementStock, mock.Anything, testRef).Return(errors.New("stock version conflict")).Twice().Run(c.add("DecrementStock:err"))
	env.OnActivity(acts.DecrementStock, mock.Anything, testRef).Return(nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(errors.New("redis timeout")).Once().Run(c.add("Notify:err"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once().Run(c.add("Notify"))
	// Compensations are retried until they succeed.
	env.OnActivity(comp.RestoreStock, mock.Anything, mock.Anything).Return(false, errors.New("mysql down")).Times(3).Run(c.add("RestoreStock:err"))
	mockCompensations(env, c, order.StatusCancelled, ReasonPaymentTimeout, "RestoreStock", "MarkOrder", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	equal(t, c.list(), []string{"PersistOrder:err", "PersistOrder", "DecrementStock:err", "DecrementStock:err", "DecrementStock",
		"Notify:err", "Notify", "RestoreStock:err", "RestoreStock:err", "RestoreStock:err", "RestoreStock", "MarkOrder", "ReleaseUnit", "Notify:CANCELLED"})
	env.AssertExpectations(t)
}

// TestOrderSagaPayRacesTimeout sends the payment exactly when the window
// closes, and just before and just after: each run ends in exactly one of
// PAID (no compensation) or CANCELLED (payment rejected, each compensation once).
func TestOrderSagaPayRacesTimeout(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offset time.Duration
		want   order.Status // "" = either, but exactly one
	}{
		{"before", -time.Millisecond, order.StatusPaid},
		{"exactly", 0, ""},
		{"after", time.Millisecond, order.StatusCancelled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, c := newEnv(t)
			mockForward(env, c)
			paid := env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Maybe()
			env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Maybe()
			// A slow compensation keeps the workflow open, so a late payment
			// reaches it and must be rejected.
			env.OnActivity(comp.RestoreStock, mock.Anything, mock.Anything).After(2*time.Second).Return(true, nil).Maybe().Run(c.add("RestoreStock"))
			env.OnActivity(comp.MarkOrder, mock.Anything, mock.Anything).Return(view(order.StatusCancelled, ReasonPaymentTimeout), nil).Maybe().Run(c.add("MarkOrder"))
			env.OnActivity(comp.ReleaseUnit, mock.Anything, mock.Anything).Return(true, nil).Maybe().Run(c.add("ReleaseUnit"))
			env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusCancelled)).Return(nil).Maybe()
			_ = paid
			var pay updateResult
			env.RegisterDelayedCallback(func() { sendUpdate(env, UpdatePay, &pay) }, testWindow*time.Second+tc.offset)
			env.ExecuteWorkflow(WorkflowType, testIn)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			var res order.View
			_ = env.GetWorkflowResult(&res)
			steps := c.list()
			switch res.Status {
			case order.StatusPaid:
				if pay.err != nil || pay.rejected != nil || pay.view.Status != order.StatusPaid {
					t.Fatalf("order PAID but pay answered %+v", pay)
				}
				equal(t, steps, []string{"PersistOrder", "DecrementStock", "Notify"})
			case order.StatusCancelled:
				if !isNotPayable(pay.rejected) && !isNotPayable(pay.err) {
					t.Fatalf("order CANCELLED but pay answered %+v", pay)
				}
				equal(t, steps, []string{"PersistOrder", "DecrementStock", "Notify", "RestoreStock", "MarkOrder", "ReleaseUnit"})
			default:
				t.Fatalf("result %+v", res)
			}
			if tc.want != "" && res.Status != tc.want {
				t.Fatalf("status %s, want %s", res.Status, tc.want)
			}
			t.Logf("pay at window%+v -> %s", tc.offset, res.Status)
		})
	}
}

func TestOrderSagaWorkflowCancelCompensates(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCompensations(env, c, order.StatusCancelled, ReasonWorkflowCancels, "RestoreStock", "MarkOrder", "ReleaseUnit")
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); !temporal.IsCanceledError(err) {
		t.Fatalf("workflow error %v, want canceled", err)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "Notify", "RestoreStock", "MarkOrder", "ReleaseUnit", "Notify:CANCELLED"})
	env.AssertExpectations(t)
}

func TestOrderSagaPayWhileQueuedWaitsForPending(t *testing.T) {
	env, c := newEnv(t)
	env.OnActivity(acts.PersistOrder, mock.Anything, testRef).
		Return(activities.PersistResult{Order: view(order.StatusPendingPayment, ""), PaymentTimeoutSeconds: testWindow}, nil).Once()
	// The stock step is slow; the buyer pays before the order is pending.
	env.OnActivity(acts.DecrementStock, mock.Anything, testRef).After(3 * time.Second).Return(nil).Once()
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once()
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(view(order.StatusPaid, ""), nil).Once()
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once()
	var pay updateResult
	env.RegisterDelayedCallback(func() { sendUpdate(env, UpdatePay, &pay) }, time.Second)
	env.ExecuteWorkflow(WorkflowType, testIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if pay.err != nil || pay.view.Status != order.StatusPaid {
		t.Fatalf("pay: %+v", pay)
	}
	_ = c
	env.AssertExpectations(t)
}
