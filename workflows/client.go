package workflows

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
)

// Client starts order sagas and wakes them. Safe for concurrent use.
type Client struct {
	c         client.Client
	taskQueue string
	eager     bool
	payments  bool
}

// NewClient returns a Client on the saga's task queue.
func NewClient(c client.Client, taskQueue string) *Client {
	if taskQueue == "" {
		panic("workflows.NewClient: empty task queue")
	}
	return &Client{c: c, taskQueue: taskQueue}
}

// WithEagerStart asks for Temporal's eager workflow start.
func (c *Client) WithEagerStart(on bool) *Client {
	c.eager = on
	return c
}

// WithPayments starts sagas that cancel and refund provider payments
// (Input.Payments): on when a provider is configured.
func (c *Client) WithPayments(on bool) *Client {
	c.payments = on
	return c
}

// Start starts the order's saga; one already started or closed is success.
func (c *Client) Start(ctx context.Context, m order.Message) error {
	opts := client.StartWorkflowOptions{
		ID:                                       WorkflowID(m.OrderID),
		TaskQueue:                                c.taskQueue,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		EnableEagerStart:                         c.eager,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			SearchItemID.ValueSet(m.ItemID),
			SearchUserID.ValueSet(m.UserID),
			SearchOrderStatus.ValueSet(string(order.StatusQueued)),
		),
	}
	_, err := c.c.ExecuteWorkflow(ctx, opts, WorkflowType, Input{Message: m, Payments: c.payments})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return fmt.Errorf("start saga of order %s: %w", m.OrderID, err)
	}
	return nil
}

// StartRefund starts the payment's refund workflow; one running is success.
// One that closed runs again (it refunds only what is still owed, under the
// refund row's key): a refund it left unconfirmed is never stranded.
func (c *Client) StartRefund(ctx context.Context, orderID, paymentID, reason string) error {
	return c.startRefund(ctx, RefundInput{OrderID: orderID, PaymentID: paymentID, Reason: reason},
		enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE)
}

// StartSupportRefund starts support's refund of a PAID order's payment
// (RefundInput.Support) under the same id: a repeat while it runs is
// success; after a run closed (completed, failed, or a cashier's run that
// found nothing owed yet) it runs again and refunds only what its refund
// row still owes: nothing twice.
func (c *Client) StartSupportRefund(ctx context.Context, orderID, paymentID, reason string) error {
	return c.startRefund(ctx, RefundInput{OrderID: orderID, PaymentID: paymentID, Reason: reason, Support: true},
		enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE)
}

func (c *Client) startRefund(ctx context.Context, in RefundInput, reuse enumspb.WorkflowIdReusePolicy) error {
	opts := client.StartWorkflowOptions{
		ID:                                       RefundWorkflowID(in.PaymentID),
		TaskQueue:                                c.taskQueue,
		WorkflowIDReusePolicy:                    reuse,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}
	_, err := c.c.ExecuteWorkflow(ctx, opts, RefundWorkflowType, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return fmt.Errorf("start refund of payment %s of order %s: %w", in.PaymentID, in.OrderID, err)
	}
	return nil
}

// Woken reports whether the saga's history holds a pay or cancel signal.
func (c *Client) Woken(ctx context.Context, orderID string) (bool, error) {
	it := c.c.GetWorkflowHistory(ctx, WorkflowID(orderID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return false, fmt.Errorf("history of order %s: %w", orderID, notFound(err))
		}
		if a := e.GetWorkflowExecutionSignaledEventAttributes(); a != nil && (a.SignalName == SignalPay || a.SignalName == SignalCancel) {
			return true, nil
		}
	}
	return false, nil
}

// Signal wakes an order's saga; order.ErrNotFound when it is gone.
func (c *Client) Signal(ctx context.Context, orderID, name string) error {
	if err := c.c.SignalWorkflow(ctx, WorkflowID(orderID), "", name, nil); err != nil {
		return fmt.Errorf("signal %s to order %s: %w", name, orderID, notFound(err))
	}
	return nil
}

// notFound is order.ErrNotFound for the server's NotFound, else err.
func notFound(err error) error {
	if _, ok := errors.AsType[*serviceerror.NotFound](err); ok {
		return order.ErrNotFound
	}
	return err
}
