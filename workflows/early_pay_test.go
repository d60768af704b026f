package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/order"
)

// earlyIn is an order as the API reserves it: its message carries the
// deadline.
func earlyIn(window time.Duration) (Input, activities.OrderRef) {
	in := testIn
	payBy := in.ReservedAt.Add(window)
	in.PayBy = &payBy
	ref := testRef
	ref.PayBy = &payBy
	return in, ref
}

func earlyView(status order.Status, reason string, payBy *time.Time, settling bool) order.View {
	v := view(status, reason)
	v.PayBy, v.Settling = payBy, settling
	return v
}

func mockPersist(env *testsuite.TestWorkflowEnvironment, c *calls, ref activities.OrderRef, v order.View) {
	env.OnActivity(acts.PersistOrder, mock.Anything, ref).
		Return(activities.PersistResult{Order: v, PaymentTimeoutSeconds: testWindow}, nil).Once().Run(c.add("PersistOrder"))
}

// An order the buyer paid at the door while it was QUEUED is PAID by the
// deduction and finishes in its first workflow task: no wait, no wake, no
// PENDING_PAYMENT published over the door's PAID.
func TestSagaPaidWhileQueuedFinishesWithoutAWake(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(testWindow * time.Second)
	mockPersist(env, c, ref, earlyView(order.StatusPaid, "", in.PayBy, true))
	env.OnActivity(acts.DecrementStock, mock.Anything, activities.DeductInput{OrderRef: ref, PaymentTimeoutSeconds: testWindow}).
		Return(earlyView(order.StatusPaid, "", in.PayBy, false), nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, mock.MatchedBy(func(v order.View) bool {
		return v.Status == order.StatusPaid && !v.Settling
	})).Return(nil).Once().Run(c.add("Notify:PAID"))
	env.ExecuteWorkflow(WorkflowType, in)
	if res := ended(t, env, c, order.StatusPaid, "", "PersistOrder", "DecrementStock", "Notify:PAID"); res.Settling {
		t.Fatalf("result %+v, still settling", res)
	}
	if !env.Now().Equal(in.ReservedAt) {
		t.Fatalf("the saga waited until %s", env.Now())
	}
}

// An unpaid order whose deadline (plus grace) passed while it was QUEUED is
// closed as soon as its saga runs: no stock-row unit taken, the Redis unit
// released.
func TestSagaWindowPassedWhileQueuedClosesAtOnce(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(time.Minute)
	env.SetStartTime(in.PayBy.Add(order.PayGrace + time.Minute)) // the saga runs late
	mockPersist(env, c, ref, earlyView(order.StatusQueued, "", in.PayBy, false))
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, in)
	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout, "PersistOrder", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// The same order with its window still open takes its unit and waits.
func TestSagaQueuedInTimeWaitsForPayment(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(time.Minute)
	env.SetStartTime(in.PayBy.Add(order.PayGrace - time.Second))
	mockPersist(env, c, ref, earlyView(order.StatusQueued, "", in.PayBy, false))
	env.OnActivity(acts.DecrementStock, mock.Anything, activities.DeductInput{OrderRef: ref, PaymentTimeoutSeconds: testWindow}).
		Return(earlyView(order.StatusPendingPayment, "", in.PayBy, false), nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPendingPayment)).Return(nil).Once().Run(c.add("Notify"))
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "Notify", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED"})
	env.AssertExpectations(t)
}

// A paid order the stock row has no unit for (a phantom unit after a Redis
// failover) is refunded: REFUNDED on the row and in the view, the phantom
// reservation retired (not put back on sale), the saga failed with why.
func TestSagaPhantomUnitOfAPaidOrderIsRefunded(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(testWindow * time.Second)
	mockPersist(env, c, ref, earlyView(order.StatusPaid, "", in.PayBy, true))
	env.OnActivity(acts.DecrementStock, mock.Anything, activities.DeductInput{OrderRef: ref, PaymentTimeoutSeconds: testWindow}).
		Return(order.View{}, temporal.NewNonRetryableApplicationError("item 42: stock row exhausted", order.ReasonStockExhausted, nil)).
		Once().Run(c.add("DecrementStock"))
	mockClose(env, c, order.StatusFailed, "", false, order.StatusRefunded, "STOCK_EXHAUSTED: DecrementStock: item 42: stock row exhausted", "RetireUnit")
	env.ExecuteWorkflow(WorkflowType, in)
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != order.ReasonStockExhausted {
		t.Fatalf("workflow error %v, want %s", err, order.ReasonStockExhausted)
	}
	if st := queryStatus(t, env); st != order.StatusRefunded {
		t.Fatalf("status %s, want REFUNDED", st)
	}
	equal(t, c.list(), []string{"PersistOrder", "DecrementStock", "CloseOrder", "RetireUnit", "Notify:REFUNDED"})
	env.AssertExpectations(t)
}
