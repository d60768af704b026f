package workflows

import (
	"context"
	"errors"
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

var testPayment = compensation.PaymentInput{OrderID: testIn.OrderID}

// payIn starts a saga whose payments go through a provider.
var payIn = Input{Message: testIn.Message, Payments: true}

func mockCancelPayment(env *testsuite.TestWorkflowEnvironment, c *calls, res compensation.CancelResult) {
	env.OnActivity(comp.CancelPayment, mock.Anything, testPayment).Return(res, nil).Once().Run(c.add("CancelPayment"))
}

// refunded is the row RefundPayment leaves: REFUNDED with the provider's refund id.
func refunded() compensation.RefundResult {
	v := view(order.StatusRefunded, order.ReasonPaymentTimeout)
	v.RefundID = "re_test_1"
	return compensation.RefundResult{RefundIDs: []string{v.RefundID}, Order: v}
}

func isRefund(in compensation.PaymentInput) bool {
	return in.OrderID == testIn.OrderID && in.Reason == order.ReasonPaymentTimeout
}

// At pay_by an order with a pending provider payment: the payment is
// canceled before the order closes and its unit goes back.
func TestSagaTimeoutCancelsPaymentFirst(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelCanceled})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, payIn)
	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout,
		"PersistOrder", "DecrementStock", "Notify", "CancelPayment", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// The provider says the payment already succeeded, in time: the payment
// wins (CancelPayment applied it, the row is PAID), no unit goes back.
func TestSagaCancelFindsPaymentSucceeded(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelSucceeded, Succeeded: true})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusPaid, "", "")
	env.ExecuteWorkflow(WorkflowType, payIn)
	ended(t, env, c, order.StatusPaid, "", "PersistOrder", "DecrementStock", "Notify", "CancelPayment", "CloseOrder", "Notify:PAID")
}

// A success after pay_by: the order closes, its unit goes back, then the
// payment is refunded and the order ends REFUNDED with the refund's id.
func TestSagaLateSuccessRefunded(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelSucceeded, Succeeded: true, Due: true})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusRefunded, order.ReasonPaymentTimeout, "ReleaseUnit")
	env.OnActivity(comp.RefundPayment, mock.Anything, mock.MatchedBy(isRefund)).Return(refunded(), nil).Once().Run(c.add("RefundPayment"))
	env.ExecuteWorkflow(WorkflowType, payIn)
	res := ended(t, env, c, order.StatusRefunded, order.ReasonPaymentTimeout,
		"PersistOrder", "DecrementStock", "Notify", "CancelPayment", "CloseOrder", "ReleaseUnit", "RefundPayment", "Notify:REFUNDED")
	if res.RefundID != "re_test_1" {
		t.Fatalf("result %+v, want refund_id re_test_1", res)
	}
}

// A refund the provider refuses 10 times is retried (no attempt limit)
// until it succeeds: REFUNDED, once.
func TestSagaRefundRetriedUntilConfirmed(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelSucceeded, Succeeded: true, Due: true})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusRefunded, order.ReasonPaymentTimeout, "ReleaseUnit")
	var tries, done atomic.Int32
	env.OnActivity(comp.RefundPayment, mock.Anything, mock.MatchedBy(isRefund)).
		Return(func(context.Context, compensation.PaymentInput) (compensation.RefundResult, error) {
			if tries.Add(1) <= 10 {
				return compensation.RefundResult{}, errors.New("payment provider: unavailable")
			}
			done.Add(1)
			return refunded(), nil
		})
	env.ExecuteWorkflow(WorkflowType, payIn)
	ended(t, env, c, order.StatusRefunded, order.ReasonPaymentTimeout,
		"PersistOrder", "DecrementStock", "Notify", "CancelPayment", "CloseOrder", "ReleaseUnit", "Notify:REFUNDED")
	if tries.Load() != 11 || done.Load() != 1 {
		t.Fatalf("RefundPayment tried %d times, succeeded %d, want 11 and 1", tries.Load(), done.Load())
	}
}

// The cashier's refund of a success its order's finished saga could not
// take: refunded, the REFUNDED view published.
func TestPaymentRefundWorkflow(t *testing.T) {
	env, c := newEnv(t)
	env.RegisterWorkflowWithOptions(PaymentRefund, workflowOptions(RefundWorkflowType))
	env.OnActivity(comp.RefundPayment, mock.Anything, compensation.PaymentInput{OrderID: testIn.OrderID, Reason: "payment late"}).
		Return(refunded(), nil).Once().Run(c.add("RefundPayment"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusRefunded)).Return(nil).Once().Run(c.add("Notify:REFUNDED"))
	env.ExecuteWorkflow(RefundWorkflowType, RefundInput{OrderID: testIn.OrderID, PaymentID: "pi_1", Reason: "payment late"})
	res := ended(t, env, c, order.StatusRefunded, "", "RefundPayment", "Notify:REFUNDED")
	if res.RefundID != "re_test_1" {
		t.Fatalf("result %+v", res)
	}
}

func workflowOptions(name string) workflow.RegisterOptions {
	return workflow.RegisterOptions{Name: name}
}

// Under the door (no Input.Payments, as every saga started before the
// payment steps) the close takes no payment step: its history is unchanged.
func TestSagaDoorTakesNoPaymentStep(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	env.OnActivity(comp.CancelPayment, mock.Anything, mock.Anything).Return(compensation.CancelResult{}, nil).Maybe().Run(c.add("CancelPayment"))
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, testIn)
	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout,
		"PersistOrder", "DecrementStock", "Notify", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// Support's refund of a PAID order: its own payment refunded (Support), the
// order REFUNDED, its unit back to the sale, the REFUNDED view published.
func TestSupportRefundWorkflow(t *testing.T) {
	env, c := newEnv(t)
	env.RegisterWorkflowWithOptions(PaymentRefund, workflowOptions(RefundWorkflowType))
	res := refunded()
	res.Order.Reason = order.ReasonSupportRefund
	env.OnActivity(comp.RefundPayment, mock.Anything, compensation.PaymentInput{OrderID: testIn.OrderID, Reason: "damaged", Support: true}).
		Return(res, nil).Once().Run(c.add("RefundPayment"))
	env.OnActivity(comp.ReleaseUnit, mock.Anything, compensation.ReleaseInput{OrderID: testIn.OrderID, ItemID: testIn.ItemID}).
		Return(true, nil).Once().Run(c.add("ReleaseUnit"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusRefunded)).Return(nil).Once().Run(c.add("Notify:REFUNDED"))
	env.ExecuteWorkflow(RefundWorkflowType, RefundInput{OrderID: testIn.OrderID, PaymentID: "pi_1", Reason: "damaged", Support: true})
	if v := ended(t, env, c, order.StatusRefunded, order.ReasonSupportRefund, "RefundPayment", "ReleaseUnit", "Notify:REFUNDED"); v.RefundID != "re_test_1" {
		t.Fatalf("result %+v", v)
	}
}

// A support refund that refunded nothing (no payment of this worker's
// provider) gives no unit back, publishes nothing and fails, so it shows.
func TestSupportRefundNothingDue(t *testing.T) {
	env, c := newEnv(t)
	env.RegisterWorkflowWithOptions(PaymentRefund, workflowOptions(RefundWorkflowType))
	env.OnActivity(comp.RefundPayment, mock.Anything, mock.Anything).
		Return(compensation.RefundResult{Order: view(order.StatusPaid, "")}, nil).Once().Run(c.add("RefundPayment"))
	env.ExecuteWorkflow(RefundWorkflowType, RefundInput{OrderID: testIn.OrderID, PaymentID: "pi_1", Reason: "damaged", Support: true})
	var appErr *temporal.ApplicationError
	if err := env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != ErrTypeNotRefunded {
		t.Fatalf("workflow error %v, want %s", err, ErrTypeNotRefunded)
	}
	equal(t, c.list(), []string{"RefundPayment"})
	env.AssertExpectations(t)
}

// The pay wakes a saga whose order support refunded meanwhile: the close
// runs on the REFUNDED row (its steps idempotent) and the saga ends REFUNDED.
func TestSagaPayFindsSupportRefund(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	notPayable := temporal.NewNonRetryableApplicationError("order is REFUNDED", order.ReasonNotPayable, nil,
		view(order.StatusRefunded, order.ReasonSupportRefund))
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(order.View{}, notPayable).Once().Run(c.add("MarkPaid"))
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelNone, Succeeded: true, Due: true})
	mockClose(env, c, order.StatusCancelled, order.ReasonSupportRefund, false, order.StatusRefunded, order.ReasonSupportRefund, "ReleaseUnit")
	res := refunded()
	res.Order.Reason = order.ReasonSupportRefund
	env.OnActivity(comp.RefundPayment, mock.Anything, compensation.PaymentInput{OrderID: testIn.OrderID, Reason: order.ReasonSupportRefund}).
		Return(res, nil).Once().Run(c.add("RefundPayment"))
	signal(env, SignalPay, time.Minute)
	env.ExecuteWorkflow(WorkflowType, payIn)
	ended(t, env, c, order.StatusRefunded, order.ReasonSupportRefund,
		"PersistOrder", "DecrementStock", "Notify", "MarkPaid", "CancelPayment", "CloseOrder", "ReleaseUnit", "RefundPayment", "Notify:REFUNDED")
}

// The saga could persist the order only after pay_by (MySQL was cut): its
// cancel-first learns the provider confirmed the payment in time, so the
// order takes its unit and ends PAID — never refunded for our own outage.
func TestSagaLateToPersistCompletesAPaymentConfirmedInTime(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(time.Minute)
	in.Payments = true
	env.SetStartTime(in.PayBy.Add(order.PayGrace + time.Minute))
	mockPersist(env, c, ref, earlyView(order.StatusQueued, "", in.PayBy, false))
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelSucceeded, Succeeded: true, Paid: true})
	env.OnActivity(acts.DecrementStock, mock.Anything, activities.DeductInput{OrderRef: ref, PaymentTimeoutSeconds: testWindow}).
		Return(earlyView(order.StatusPaid, "", in.PayBy, false), nil).Once().Run(c.add("DecrementStock"))
	env.OnActivity(acts.Notify, mock.Anything, withStatus(order.StatusPaid)).Return(nil).Once().Run(c.add("Notify:PAID"))
	env.ExecuteWorkflow(WorkflowType, in)
	ended(t, env, c, order.StatusPaid, "", "PersistOrder", "CancelPayment", "DecrementStock", "Notify:PAID")
}

// The same late saga whose payment the provider did not confirm in time
// closes as before, asking the provider once.
func TestSagaLateToPersistUnpaidCloses(t *testing.T) {
	env, c := newEnv(t)
	in, ref := earlyIn(time.Minute)
	in.Payments = true
	env.SetStartTime(in.PayBy.Add(order.PayGrace + time.Minute))
	mockPersist(env, c, ref, earlyView(order.StatusQueued, "", in.PayBy, false))
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelCanceled})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	env.ExecuteWorkflow(WorkflowType, in)
	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout, "PersistOrder", "CancelPayment", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}

// A pay signal nobody paid for (the row is still PENDING_PAYMENT, e.g. sent
// by hand from the Temporal UI) pays nothing: the saga waits on and closes
// at the deadline.
func TestSagaPaySignalWithoutPaymentPaysNothing(t *testing.T) {
	env, c := newEnv(t)
	mockForward(env, c)
	notPaid := temporal.NewNonRetryableApplicationError("order is PENDING_PAYMENT", order.ReasonNotPayable, nil, view(order.StatusPendingPayment, ""))
	env.OnActivity(acts.MarkPaid, mock.Anything, testRef).Return(order.View{}, notPaid).Once().Run(c.add("MarkPaid"))
	mockCancelPayment(env, c, compensation.CancelResult{Outcome: compensation.CancelCanceled})
	mockClose(env, c, order.StatusCancelled, order.ReasonPaymentTimeout, true, order.StatusCancelled, "", "ReleaseUnit")
	signal(env, SignalPay, time.Minute)
	env.ExecuteWorkflow(WorkflowType, payIn)
	ended(t, env, c, order.StatusCancelled, order.ReasonPaymentTimeout,
		"PersistOrder", "DecrementStock", "Notify", "MarkPaid", "CancelPayment", "CloseOrder", "ReleaseUnit", "Notify:CANCELLED")
}
