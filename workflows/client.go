package workflows

import (
	"context"
	"errors"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
)

// Client starts order sagas (the consumer's Starter) and wakes them after a
// pay or cancel was recorded at the door (payment.Desk). Safe for concurrent
// use.
type Client struct {
	c         client.Client
	taskQueue string
	eager     bool
}

// NewClient returns a Client on the saga's task queue
// (config.Temporal.TaskQueue, where its default lives).
func NewClient(c client.Client, taskQueue string) *Client {
	if taskQueue == "" {
		panic("workflows.NewClient: empty task queue")
	}
	return &Client{c: c, taskQueue: taskQueue}
}

// WithEagerStart asks the server to hand each started saga's first workflow
// task straight back to this process's worker (Temporal's eager workflow
// start) when c's client also runs a worker on the task queue with a free
// slot; otherwise the start is an ordinary one. It saves the matching round
// trip and lets the first steps (local activities) run at once.
func (c *Client) WithEagerStart(on bool) *Client {
	c.eager = on
	return c
}

// Start starts the order's saga, workflow ID order-<order_id>, with
// REJECT_DUPLICATE: a start that finds the workflow running or closed is a
// success, so a redelivered or duplicated message never makes a second order.
// The search attributes and the memo are set at start so support staff find
// the order before its first step runs.
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
	in := Input{Message: m, Version: SagaVersion}
	_, err := c.c.ExecuteWorkflow(ctx, opts, WorkflowType, in)
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return fmt.Errorf("start saga of order %s: %w", m.OrderID, err)
	}
	return nil
}

// Signal wakes an order's saga with SignalPay or SignalCancel (no payload).
// order.ErrNotFound when there is no such saga or it has closed.
func (c *Client) Signal(ctx context.Context, orderID, name string) error {
	err := c.c.SignalWorkflow(ctx, WorkflowID(orderID), "", name, nil)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("signal %s to order %s: %w", name, orderID, order.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("signal %s to order %s: %w", name, orderID, err)
	}
	return nil
}

// Pay takes the payment through a saga of the first version (an update) and answers with what the saga
// decided: the PAID order; order.ErrNotPayable once the order left
// PENDING_PAYMENT (timed out, cancelled, failed); order.ErrNotFound when there
// is no such saga. Paying a PAID order again returns it without error.
func (c *Client) Pay(ctx context.Context, orderID string) (order.View, error) {
	return c.update(ctx, orderID, UpdatePay)
}

// Cancel cancels a PENDING_PAYMENT order of a first-version saga on the
// buyer's behalf (an update); the saga
// compensates before it answers with the CANCELLED order.
// order.ErrNotPayable once the order left PENDING_PAYMENT.
func (c *Client) Cancel(ctx context.Context, orderID string) (order.View, error) {
	return c.update(ctx, orderID, UpdateCancel)
}

// Status queries the saga for the order as it sees it.
func (c *Client) Status(ctx context.Context, orderID string) (order.View, error) {
	res, err := c.c.QueryWorkflow(ctx, WorkflowID(orderID), "", QueryStatus)
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return order.View{}, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
		}
		return order.View{}, fmt.Errorf("query order %s: %w", orderID, err)
	}
	var v order.View
	if err := res.Get(&v); err != nil {
		return order.View{}, fmt.Errorf("decode status of order %s: %w", orderID, err)
	}
	return v, nil
}

func (c *Client) update(ctx context.Context, orderID, name string) (order.View, error) {
	h, err := c.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   WorkflowID(orderID),
		UpdateName:   name,
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var v order.View
	if err == nil {
		err = h.Get(ctx, &v)
	}
	if err == nil {
		return v, nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == ErrTypeNotPayable {
		var cur order.View
		if appErr.HasDetails() {
			_ = appErr.Details(&cur)
		}
		if name == UpdatePay && cur.Status == order.StatusPaid {
			return cur, nil
		}
		return cur, fmt.Errorf("%s order %s: %w", name, orderID, order.ErrNotPayable)
	}
	var nf *serviceerror.NotFound
	if !errors.As(err, &nf) {
		return order.View{}, fmt.Errorf("%s order %s: %w", name, orderID, err)
	}
	// NotFound: no such saga, or it has closed (an update cannot reach a
	// closed workflow). A closed saga's order is final: only a repeated
	// payment of a PAID order succeeds.
	cur, qerr := c.closedView(ctx, orderID)
	if qerr != nil {
		return order.View{}, qerr
	}
	if name == UpdatePay && cur.Status == order.StatusPaid {
		return cur, nil
	}
	return cur, fmt.Errorf("%s order %s (%s): %w", name, orderID, cur.Status, order.ErrNotPayable)
}

// closedView reads the final order of a closed saga from its history (no
// worker needed): the result of a completed saga (PAID, or CANCELLED), else
// the status search attribute. order.ErrNotFound when the saga does not exist.
func (c *Client) closedView(ctx context.Context, orderID string) (order.View, error) {
	desc, err := c.c.DescribeWorkflow(ctx, WorkflowID(orderID), "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return order.View{}, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
	}
	if err != nil {
		return order.View{}, fmt.Errorf("describe order %s: %w", orderID, err)
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo()
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		return order.View{}, fmt.Errorf("order %s: saga is running but did not take the update", orderID)
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		var v order.View
		if err := c.c.GetWorkflow(ctx, WorkflowID(orderID), info.GetExecution().GetRunId()).Get(ctx, &v); err != nil {
			return order.View{}, fmt.Errorf("read result of order %s: %w", orderID, err)
		}
		return v, nil
	}
	v := order.View{OrderID: orderID, Status: order.StatusFailed}
	if p, ok := info.GetSearchAttributes().GetIndexedFields()[SearchOrderStatus.GetName()]; ok {
		var st string
		if converter.GetDefaultDataConverter().FromPayload(p, &st) == nil && order.Status(st).Valid() {
			v.Status = order.Status(st)
		}
	}
	return v, nil
}
