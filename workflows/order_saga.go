package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
)

// Typed nil pointers: the worker registers real ones under the same method names.
var (
	acts *activities.Activities
	comp *compensation.Activities
)

// Every step is a local activity first (two workflow tasks per healthy
// order); one still failing after localBudget continues as a regular
// activity, retried without limit. Only business outcomes end a step.
const localBudget = 30 * time.Second

var (
	localOptions = workflow.LocalActivityOptions{ScheduleToCloseTimeout: localBudget, StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: doubling(100*time.Millisecond, 5*time.Second)}
	slowOptions = workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second, RetryPolicy: doubling(time.Second, 10*time.Second)}
	// A status the API cannot see yet is a nuisance (GET falls back to the
	// database), never a reason to hold or fail an order — nor to hold the
	// workflow task: a Redis that does not answer (its replies lost) fails
	// Notify within a second, twice at most (it blocked the task 3 s a try,
	// for up to 10 s, and stalled the saga tier after the heal).
	notifyOptions = workflow.LocalActivityOptions{ScheduleToCloseTimeout: 2 * time.Second, StartToCloseTimeout: time.Second,
		RetryPolicy: doubling(100*time.Millisecond, 500*time.Millisecond)}
)

func doubling(initial, maximum time.Duration) *temporal.RetryPolicy {
	return &temporal.RetryPolicy{InitialInterval: initial, BackoffCoefficient: 2, MaximumInterval: maximum}
}

type decision int

const (
	undecided decision = iota
	decidedPay
	decidedCancel  // buyer (recorded at the door) or support staff, by signal
	decidedTimeout // payment window plus grace elapsed
	decidedAbort   // workflow cancelled by an operator
)

// saga is the state of one order's workflow.
type saga struct {
	ref      activities.OrderRef
	view     order.View
	payments bool // Input.Payments
}

// OrderSaga takes a reserved order to PENDING_PAYMENT, then PAID, or
// CANCELLED or FAILED with its units given back. The order row decides.
func OrderSaga(ctx workflow.Context, in Input) (order.View, error) {
	s := &saga{
		ref:      activities.OrderRef{OrderID: in.OrderID, ItemID: in.ItemID, UserID: in.UserID, PayBy: in.PayBy},
		view:     order.View{OrderID: in.OrderID, ItemID: in.ItemID, UserID: in.UserID, Status: order.StatusQueued, CreatedAt: in.ReservedAt, UpdatedAt: in.ReservedAt},
		payments: in.Payments,
	}
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryStatus, func() (order.View, error) { return s.view, nil },
		workflow.QueryHandlerOptions{Description: "the order as the saga sees it"}); err != nil {
		return s.view, err
	}
	return s.run(ctx)
}

func (s *saga) run(ctx workflow.Context) (order.View, error) {
	// The Redis reservation exists already: every failure from here on is undone by close.
	var persisted activities.PersistResult
	if err := s.step(ctx, acts.PersistOrder, s.ref, &persisted); err != nil {
		return s.fail(ctx, "PersistOrder", err)
	}
	// Past pay_by (plus grace) while QUEUED and unpaid: closed, no stock-row
	// unit taken — unless cancel-first learns that the provider confirmed its
	// payment in time (our side could not write it then): that order is owed
	// its unit and goes on to take it.
	if p := persisted.Order; p.Status == order.StatusQueued && p.PayBy != nil &&
		!workflow.Now(ctx).Before(p.PayBy.Add(order.PayGrace)) {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		pay := s.cancelPayment(dctx)
		if !pay.Paid {
			return s.closeAfter(dctx, pay, order.StatusCancelled, order.ReasonPaymentTimeout, true, nil)
		}
		workflow.GetLogger(ctx).Info("the provider confirmed the payment before pay_by: the order takes its unit")
	}
	var pending order.View
	in := activities.DeductInput{OrderRef: s.ref, PaymentTimeoutSeconds: persisted.PaymentTimeoutSeconds}
	if err := s.step(ctx, acts.DecrementStock, in, &pending); err != nil {
		return s.fail(ctx, "DecrementStock", err)
	}
	s.view = pending
	if pending.Status == order.StatusPaid {
		return s.finishPaid(ctx) // paid at the door while QUEUED: the deduction made it PAID
	}
	s.upsertStatus(ctx, order.StatusPendingPayment)
	s.notify(ctx)

	for {
		switch s.await(ctx, persisted.PaymentTimeoutSeconds) {
		case decidedPay:
			if v, open, err := s.settlePaid(ctx); !open {
				return v, err
			}
			// A pay signal the row does not show (not the door's): wait on.
		case decidedCancel:
			return s.close(ctx, order.StatusCancelled, order.ReasonBuyerCancelled, false, nil)
		case decidedAbort:
			return s.abort(ctx)
		default:
			return s.close(ctx, order.StatusCancelled, order.ReasonPaymentTimeout, true, nil)
		}
	}
}

// await waits for a signal, the payment window or a cancellation (the timer
// is left to expire: one event less).
func (s *saga) await(ctx workflow.Context, windowSeconds int) decision {
	wait := time.Duration(windowSeconds)*time.Second + order.PayGrace
	if s.view.PayBy != nil {
		wait = s.view.PayBy.Add(order.PayGrace).Sub(workflow.Now(ctx))
	}
	wait = max(wait, time.Second)
	timer := workflow.NewTimerWithOptions(ctx, wait, workflow.TimerOptions{Summary: "payment window"})
	d := undecided
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalPay), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		d = decidedPay
	})
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalCancel), func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		d = decidedCancel
	})
	sel.AddFuture(timer, func(f workflow.Future) {
		if temporal.IsCanceledError(f.Get(ctx, nil)) {
			d = decidedAbort
		} else {
			d = decidedTimeout
		}
	})
	sel.Select(ctx)
	return d
}

// step runs one idempotent activity: locally, then as a regular activity.
func (s *saga) step(ctx workflow.Context, activity, in, out any) error {
	lctx := workflow.WithLocalActivityOptions(ctx, localOptions)
	err := workflow.ExecuteLocalActivity(lctx, activity, in).Get(lctx, out)
	if err == nil || final(err) {
		return err
	}
	workflow.GetLogger(ctx).Warn("step still failing; retrying it as a regular activity", "error", err)
	actx := workflow.WithActivityOptions(ctx, slowOptions)
	return workflow.ExecuteActivity(actx, activity, in).Get(actx, out)
}

// final reports whether err ends a step: a business outcome or a cancellation.
func final(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.NonRetryable() || temporal.IsCanceledError(err)
}

// fail compensates after a forward step ended with a business outcome or a cancellation.
func (s *saga) fail(ctx workflow.Context, step string, err error) (order.View, error) {
	if temporal.IsCanceledError(err) {
		return s.abort(ctx)
	}
	reasonType, msg := "STEP_FAILED", err.Error()
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		msg = appErr.Message()
		if appErr.Type() != "" {
			reasonType = appErr.Type()
		}
	}
	reason := fmt.Sprintf("%s: %s: %s", reasonType, step, msg)
	return s.close(ctx, order.StatusFailed, reason, false,
		temporal.NewNonRetryableApplicationError(reason, reasonType, err))
}

// abort closes an order whose workflow an operator cancelled.
func (s *saga) abort(ctx workflow.Context) (order.View, error) {
	v, err := s.close(ctx, order.StatusCancelled, order.ReasonOperatorCancelled, false, nil)
	if err == nil && v.Status != order.StatusPaid {
		err = temporal.NewCanceledError(order.ReasonOperatorCancelled)
	}
	return v, err
}

// close compensates in a disconnected context; a PAID row wins. cause is the workflow's failure.
// The order's provider payment is canceled first (a success found wins) and
// money that must go back is refunded last, after the unit.
func (s *saga) close(ctx workflow.Context, status order.Status, reason string, timeout bool, cause error) (order.View, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	return s.closeAfter(dctx, s.cancelPayment(dctx), status, reason, timeout, cause)
}

// closeAfter is close once cancel-first answered pay, in the disconnected dctx.
func (s *saga) closeAfter(dctx workflow.Context, pay compensation.CancelResult, status order.Status, reason string, timeout bool, cause error) (order.View, error) {
	var res compensation.CloseResult
	in := compensation.CloseInput{OrderID: s.ref.OrderID, ItemID: s.ref.ItemID, UserID: s.ref.UserID,
		Status: status, Reason: reason, Timeout: timeout}
	if err := s.step(dctx, comp.CloseOrder, in, &res); err != nil {
		// Only a bug gets here: CloseOrder has no business failure.
		workflow.GetLogger(dctx).Error("CloseOrder failed for good", "error", err)
		return s.view, errors.Join(cause, err)
	}
	s.view = res.Order
	var appErr *temporal.ApplicationError
	phantom := errors.As(cause, &appErr) && appErr.Type() == order.ReasonStockExhausted
	if status == order.StatusFailed && s.view.Status != order.StatusFailed && s.view.Status != order.StatusRefunded {
		// Decided elsewhere first (ORDER_CLOSED): the saga has not failed.
		// REFUNDED (paid while QUEUED) fails all the same.
		cause = nil
	}
	if s.view.Status == order.StatusPaid {
		workflow.GetLogger(dctx).Info("the order was paid in time; nothing to give back", "wanted", status)
		if pay.Due {
			_ = s.refund(dctx, reason) // another payment's money: the order stays PAID
			s.view.Status = order.StatusPaid
		}
		return s.finishPaid(dctx)
	}
	s.upsertStatus(dctx, s.view.Status)
	unit := comp.ReleaseUnit
	if phantom && cause != nil {
		unit = comp.RetireUnit
	}
	if err := s.step(dctx, unit, compensation.ReleaseInput{OrderID: s.ref.OrderID, ItemID: s.ref.ItemID}, nil); err != nil {
		workflow.GetLogger(dctx).Error("unit step failed for good", "error", err)
		cause = errors.Join(cause, err)
	}
	if pay.Succeeded || pay.Due {
		if err := s.refund(dctx, reason); err != nil {
			cause = errors.Join(cause, err)
		} else {
			s.upsertStatus(dctx, s.view.Status)
		}
	}
	s.notify(dctx)
	return s.view, cause
}

// cancelPayment cancels the order's provider payment before any unit goes
// back (CancelPayment: no provider call without a pending payment). Only a
// saga started with Input.Payments takes the payment steps: the flag is in
// its start event, so sagas started before them (and every saga under the
// door) replay unchanged, with not one event more (workflow.GetVersion
// would add a marker and a search-attribute upsert to every close and
// break the 20-event budget).
func (s *saga) cancelPayment(ctx workflow.Context) compensation.CancelResult {
	var res compensation.CancelResult
	if !s.payments {
		return res
	}
	if err := s.step(ctx, comp.CancelPayment, compensation.PaymentInput{OrderID: s.ref.OrderID}, &res); err != nil {
		// Only a bug gets here: CancelPayment has no business failure.
		workflow.GetLogger(ctx).Error("CancelPayment failed for good", "error", err)
	}
	return res
}

// refund runs RefundPayment, a regular activity of its own (seen in the UI),
// retried until the provider confirms; the view becomes the row after it.
func (s *saga) refund(ctx workflow.Context, reason string) error {
	var res compensation.RefundResult
	if err := runRefund(ctx, compensation.PaymentInput{OrderID: s.ref.OrderID, Reason: reason}, &res); err != nil {
		workflow.GetLogger(ctx).Error("RefundPayment failed for good", "error", err)
		return err
	}
	if res.Order.OrderID != "" {
		s.view = res.Order
	}
	return nil
}

// settlePaid confirms the payment the row records; a row closed instead is
// compensated. open: the row is still open and unpaid (a pay signal nobody
// paid for pays nothing), the saga waits on.
func (s *saga) settlePaid(ctx workflow.Context) (_ order.View, open bool, _ error) {
	var v order.View
	err := s.step(ctx, acts.MarkPaid, s.ref, &v)
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == order.ReasonNotPayable {
		var row order.View
		if appErr.HasDetails() && appErr.Details(&row) == nil && row.Status.Final() {
			st := row.Status
			if st == order.StatusRefunded {
				// Refunded by support before the pay woke the saga: the
				// close finds its steps done and ends on the row.
				st = order.StatusCancelled
			}
			v, err := s.close(ctx, st, row.Reason, false, nil)
			return v, false, err
		}
		if row.Status == order.StatusPendingPayment {
			workflow.GetLogger(ctx).Warn("pay signal without a paid row: ignored")
			return s.view, true, nil
		}
		v, err := s.close(ctx, order.StatusCancelled, order.ReasonPaymentTimeout, true, nil)
		return v, false, err
	}
	if err != nil {
		return s.view, false, err
	}
	s.view = v
	v, err = s.finishPaid(ctx)
	return v, false, err
}

func (s *saga) finishPaid(ctx workflow.Context) (order.View, error) {
	s.upsertStatus(ctx, order.StatusPaid)
	s.notify(ctx)
	return s.view, nil
}

// notify publishes the saga's view for the API; a failure is only logged.
func (s *saga) notify(ctx workflow.Context) {
	nctx := workflow.WithLocalActivityOptions(ctx, notifyOptions)
	if err := workflow.ExecuteLocalActivity(nctx, acts.Notify, s.view).Get(nctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("Notify failed; the API reads the order from the database", "status", s.view.Status, "error", err)
	}
}

// upsertStatus keeps SearchOrderStatus in step with the order.
func (s *saga) upsertStatus(ctx workflow.Context, status order.Status) {
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchOrderStatus.ValueSet(string(status))); err != nil {
		workflow.GetLogger(ctx).Warn("upsert search attributes", "error", err)
	}
}
