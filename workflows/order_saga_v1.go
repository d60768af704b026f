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

// Forward steps (PersistOrder, DecrementStock, Notify) are LOCAL activities:
// each is one short MySQL or Redis call on the hot path from message to
// PENDING_PAYMENT, and a local activity runs inside the workflow task, with no
// task-queue round trip and no activity events: about 1.6x the sagas per
// second of regular activities on the dev server. Their retries are bounded
// (the issue: a forward step that runs out of retries fails for good and is
// compensated). All three are idempotent, which a local activity needs: it is
// run again if the worker dies before the workflow task completes.
var v1ForwardOptions = workflow.LocalActivityOptions{
	ScheduleToCloseTimeout: time.Minute,
	StartToCloseTimeout:    10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    100 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    5 * time.Second,
		MaximumAttempts:    10,
	},
}

// Compensations and the steps after a decision (MarkPaid, the final Notify)
// are REGULAR activities retried without limit: they must succeed eventually,
// even across a long MySQL or Redis outage or a worker restart, and a regular
// activity is retried by the server and shows its last failure in the UI
// while it is stuck. They are off the hot path.
var v1MustSucceedOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 10 * time.Second,
	RetryPolicy: &temporal.RetryPolicy{
		InitialInterval:    500 * time.Millisecond,
		BackoffCoefficient: 2,
		MaximumInterval:    time.Minute,
		MaximumAttempts:    0, // unlimited
	},
}

type v1Decision int

const (
	v1Undecided v1Decision = iota
	v1Pay
	v1Cancel  // buyer, through the cancel update
	v1Timeout // payment window elapsed
	v1Abort   // workflow cancelled by an operator
	v1Fail    // a forward step failed for good
)

// saga is the state of one order's workflow. Only the workflow's own
// coroutines touch it, one at a time, so the decision between pay, cancel and
// the timer is made exactly once.
type sagaV1 struct {
	in       Input
	ref      activities.OrderRef
	view     order.View
	pending  bool // forward steps done: the order is PENDING_PAYMENT
	decision v1Decision
	done     bool // the decision has been carried out
	comp     compensation.Saga
}

// orderSagaV1 is the saga as it ran before the payment was judged at the
// door (inputs without Input.Version): kept unchanged so that
// sagas started by it replay and finish. It turns one reserved order into a PENDING_PAYMENT order, waits for
// payment and ends PAID, or CANCELLED or FAILED with everything undone.
func orderSagaV1(ctx workflow.Context, in Input) (order.View, error) {
	s := &sagaV1{
		in:   in,
		ref:  activities.OrderRef{OrderID: in.OrderID, ItemID: in.ItemID, UserID: in.UserID},
		view: order.View{OrderID: in.OrderID, ItemID: in.ItemID, UserID: in.UserID, Status: order.StatusQueued, CreatedAt: in.ReservedAt, UpdatedAt: in.ReservedAt},
	}
	if err := s.registerHandlers(ctx); err != nil {
		return s.view, err
	}
	view, err := s.run(ctx)
	// Let pay/cancel handlers that are waiting for the outcome answer first.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	_ = workflow.Await(dctx, func() bool { return workflow.AllHandlersFinished(dctx) })
	return view, err
}

func (s *sagaV1) run(ctx workflow.Context) (order.View, error) {
	fwd := workflow.WithLocalActivityOptions(ctx, v1ForwardOptions)

	// The Redis reservation was made before the saga started: its undo is
	// registered first so that it runs even when PersistOrder fails. MarkOrder
	// is registered with it: it records the order's outcome (inserting the row
	// if PersistOrder never wrote it), so a failed order is FAILED in MySQL
	// whenever a row can hold it.
	s.comp.Add("ReleaseUnit", s.releaseUnit)
	s.comp.Add("MarkOrder", s.markOrder)

	var persisted activities.PersistResult
	if err := workflow.ExecuteLocalActivity(fwd, acts.PersistOrder, s.ref).Get(fwd, &persisted); err != nil {
		return s.fail(ctx, "PersistOrder", err)
	}
	s.view = persisted.Order

	if err := workflow.ExecuteLocalActivity(fwd, acts.DecrementStock, activities.DeductInput{OrderRef: s.ref}).Get(fwd, nil); err != nil {
		return s.fail(ctx, "DecrementStock", err)
	}
	s.comp.Add("RestoreStock", s.restoreStock)

	s.upsertStatus(ctx, order.StatusPendingPayment, "")
	if err := workflow.ExecuteLocalActivity(fwd, acts.Notify, s.view).Get(fwd, nil); err != nil {
		return s.fail(ctx, "Notify", err)
	}
	s.pending = true

	window := time.Duration(persisted.PaymentTimeoutSeconds) * time.Second
	paidOrCancelled, err := workflow.AwaitWithOptions(ctx, workflow.AwaitOptions{
		Timeout:      window,
		TimerOptions: workflow.TimerOptions{Summary: "payment window"},
	}, func() bool { return s.decision != v1Undecided })
	// Whatever set s.decision first wins; the timer and a cancellation only
	// count while nothing was decided.
	if s.decision == v1Undecided {
		if err != nil {
			s.decision = v1Abort
		} else if !paidOrCancelled {
			s.decision = v1Timeout
		}
	}
	switch s.decision {
	case v1Pay:
		return s.settlePaid(ctx)
	case v1Cancel:
		return s.close(ctx, order.StatusCancelled, order.ReasonBuyerCancelled, nil)
	case v1Abort:
		v, _ := s.close(ctx, order.StatusCancelled, order.ReasonOperatorCancelled, nil)
		return v, temporal.NewCanceledError(order.ReasonOperatorCancelled)
	default:
		return s.close(ctx, order.StatusCancelled, order.ReasonPaymentTimeout, nil)
	}
}

// fail compensates after a forward step failed for good and fails the
// workflow with the typed reason.
func (s *sagaV1) fail(ctx workflow.Context, step string, err error) (order.View, error) {
	reasonType, msg := "RETRIES_EXHAUSTED", err.Error()
	var actErr *temporal.ActivityError
	if errors.As(err, &actErr) && errors.Unwrap(actErr) != nil {
		msg = errors.Unwrap(actErr).Error()
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		msg = appErr.Message()
		if appErr.NonRetryable() && appErr.Type() != "" {
			reasonType = appErr.Type()
		}
	}
	if reasonType == order.ReasonOrderClosed {
		// The row was already final: someone else (an earlier run, or the
		// dead-letter handler) decided this order and undid what was needed.
		// Compensating again could release a paid order's unit.
		var final order.View
		if appErr.HasDetails() && appErr.Details(&final) == nil {
			s.view = final
		}
		workflow.GetLogger(ctx).Warn("order already decided elsewhere; nothing to do", "status", s.view.Status)
		s.decision, s.done = v1Fail, true
		s.upsertStatus(ctx, s.view.Status, msg)
		return s.view, nil
	}
	if temporal.IsCanceledError(err) {
		s.decision = v1Abort
		v, _ := s.close(ctx, order.StatusCancelled, order.ReasonOperatorCancelled, nil)
		return v, temporal.NewCanceledError(order.ReasonOperatorCancelled)
	}
	s.decision = v1Fail
	reason := fmt.Sprintf("%s: %s: %s", reasonType, step, msg)
	return s.close(ctx, order.StatusFailed, reason,
		temporal.NewNonRetryableApplicationError(reason, reasonType, err))
}

// close runs the compensations in reverse, records the final status and
// publishes it. cause, when set, is returned as the workflow's failure.
func (s *sagaV1) close(ctx workflow.Context, status order.Status, reason string, cause error) (order.View, error) {
	s.view.Status, s.view.Reason = status, reason
	s.upsertStatus(ctx, status, reason)
	workflow.GetLogger(ctx).Info("compensating", "status", status, "reason", reason, "steps", s.comp.Names())
	if err := s.comp.Compensate(ctx); err != nil {
		cause = errors.Join(cause, err)
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, v1MustSucceedOptions), acts.Notify, s.view).Get(dctx, nil); err != nil {
		cause = errors.Join(cause, err)
	}
	s.done = true
	return s.view, cause
}

// settlePaid records the payment; once paid, nothing is compensated.
func (s *sagaV1) settlePaid(ctx workflow.Context) (order.View, error) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	actx := workflow.WithActivityOptions(dctx, v1MustSucceedOptions)
	var v order.View
	if err := workflow.ExecuteActivity(actx, acts.MarkPaid, s.ref).Get(actx, &v); err != nil {
		// Only ORDER_NOT_PAYABLE ends here: the row was closed behind the
		// saga's back. Leave the units alone for support to look at.
		workflow.GetLogger(ctx).Error("MarkPaid failed for good", "error", err)
		s.done = true
		return s.view, err
	}
	s.view = v
	s.upsertStatus(ctx, order.StatusPaid, "")
	err := workflow.ExecuteActivity(actx, acts.Notify, s.view).Get(actx, nil)
	s.done = true
	return s.view, err
}

func (s *sagaV1) releaseUnit(ctx workflow.Context) error {
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, v1MustSucceedOptions), comp.ReleaseUnit,
		compensation.ReleaseInput{OrderID: s.in.OrderID, ItemID: s.in.ItemID}).Get(ctx, nil)
}

func (s *sagaV1) markOrder(ctx workflow.Context) error {
	var v order.View
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, v1MustSucceedOptions), comp.MarkOrder,
		compensation.MarkInput{OrderID: s.in.OrderID, ItemID: s.in.ItemID, UserID: s.in.UserID,
			Status: s.view.Status, Reason: s.view.Reason}).Get(ctx, &v)
	if err == nil && v.OrderID != "" {
		s.view = v
	}
	return err
}

func (s *sagaV1) restoreStock(ctx workflow.Context) error {
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, v1MustSucceedOptions), comp.RestoreStock,
		compensation.RestoreInput{OrderID: s.in.OrderID}).Get(ctx, nil)
}

// upsertStatus keeps the SeckillOrderStatus search attribute (and the reason
// memo) in step with the order, for support staff's queries.
func (s *sagaV1) upsertStatus(ctx workflow.Context, status order.Status, reason string) {
	log := workflow.GetLogger(ctx)
	if err := workflow.UpsertTypedSearchAttributes(ctx, SearchOrderStatus.ValueSet(string(status))); err != nil {
		log.Warn("upsert search attributes", "error", err)
	}
	if reason != "" {
		if err := workflow.UpsertMemo(ctx, map[string]any{MemoReason: reason}); err != nil {
			log.Warn("upsert memo", "error", err)
		}
	}
}

func (s *sagaV1) registerHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandlerWithOptions(ctx, QueryStatus, func() (order.View, error) { return s.view, nil },
		workflow.QueryHandlerOptions{Description: "the order as the saga sees it"}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, UpdatePay, s.pay, workflow.UpdateHandlerOptions{
		Validator:   s.validatePay,
		Description: "take the payment; answers with the order (PAID) or ORDER_NOT_PAYABLE",
	}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, UpdateCancel, s.cancel, workflow.UpdateHandlerOptions{
		Validator:   s.validateCancel,
		Description: "cancel on the buyer's behalf; compensates; answers with the order (CANCELLED) or ORDER_NOT_PAYABLE",
	})
}

func notPayableV1(v order.View) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("order %s is %s: %s", v.OrderID, v.Status, order.ErrNotPayable), ErrTypeNotPayable, nil, v)
}

// validatePay accepts a payment while the order is (or is about to become)
// PENDING_PAYMENT and nothing else was decided, and a repeated payment of a
// paid order. Rejected updates leave no trace in the history.
func (s *sagaV1) validatePay(workflow.Context) error {
	if s.decision == v1Pay {
		return nil
	}
	if s.decision != v1Undecided || s.view.Status.Final() {
		return notPayableV1(s.view)
	}
	return nil
}

func (s *sagaV1) pay(ctx workflow.Context) (order.View, error) {
	if err := workflow.Await(ctx, func() bool { return s.pending || s.decision != v1Undecided }); err != nil {
		return s.view, err
	}
	if s.decision == v1Undecided {
		s.decision = v1Pay
	}
	if s.decision != v1Pay {
		return s.view, notPayableV1(s.view)
	}
	if err := workflow.Await(ctx, func() bool { return s.done }); err != nil {
		return s.view, err
	}
	if s.view.Status != order.StatusPaid {
		return s.view, notPayableV1(s.view)
	}
	return s.view, nil
}

// validateCancel accepts a cancel only while nothing was decided.
func (s *sagaV1) validateCancel(workflow.Context) error {
	if s.decision != v1Undecided || s.view.Status.Final() {
		return notPayableV1(s.view)
	}
	return nil
}

func (s *sagaV1) cancel(ctx workflow.Context) (order.View, error) {
	if err := workflow.Await(ctx, func() bool { return s.pending || s.decision != v1Undecided }); err != nil {
		return s.view, err
	}
	if s.decision == v1Undecided {
		s.decision = v1Cancel
	}
	if s.decision != v1Cancel {
		return s.view, notPayableV1(s.view)
	}
	if err := workflow.Await(ctx, func() bool { return s.done }); err != nil {
		return s.view, err
	}
	return s.view, nil
}
