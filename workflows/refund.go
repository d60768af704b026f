package workflows

import (
	"math"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/order"
)

// A refund is retried until the provider confirms it, the wait capped at a
// minute: MaxInt32 attempts is unlimited in practice (0 would be too, but
// the SDK's test environment caps 0 at 10). seckill_payment_refund_failures_total
// counts the failures; SeckillRefundFailing alerts.
var refundOptions = workflow.ActivityOptions{StartToCloseTimeout: time.Minute, Summary: "refund through the provider",
	RetryPolicy: &temporal.RetryPolicy{InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: time.Minute,
		MaximumAttempts: math.MaxInt32}}

func runRefund(ctx workflow.Context, in compensation.PaymentInput, out *compensation.RefundResult) error {
	actx := workflow.WithActivityOptions(ctx, refundOptions)
	return workflow.ExecuteActivity(actx, comp.RefundPayment, in).Get(actx, out)
}

// RefundInput starts a PaymentRefund: a payment that succeeded after its
// order's saga could take it into account, or support's refund of a PAID
// order (Support).
type RefundInput struct {
	OrderID   string `json:"order_id"`
	PaymentID string `json:"payment_id"` // the provider's
	Reason    string `json:"reason"`
	// Support: the payment that paid the order is refunded too, the order
	// becomes REFUNDED and its unit goes back to the sale. Absent in the
	// cashier's refunds, which replay without the step.
	Support bool `json:"support,omitempty"`
}

// ErrTypeNotRefunded fails a support refund that refunded nothing.
const ErrTypeNotRefunded = "NOT_REFUNDED"

// unitOptions: ReleaseUnit as a regular activity, retried until Redis answers.
var unitOptions = workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second, Summary: "the unit back to the sale",
	RetryPolicy: doubling(time.Second, time.Minute)}

// PaymentRefund refunds what must go back of an order's payments
// (RefundPayment) and publishes the order's view when it changed. Started
// by the cashier for a success the door could not take (late, not payable,
// mismatch), and by support (POST /api/v1/orders/:id/refund), one per
// payment (RefundWorkflowID). A support refund's order is REFUNDED with its
// stock-row unit back in the same transaction; its Redis unit follows
// (ReleaseUnit, once per order).
func PaymentRefund(ctx workflow.Context, in RefundInput) (order.View, error) {
	var res compensation.RefundResult
	pin := compensation.PaymentInput{OrderID: in.OrderID, Reason: in.Reason, Support: in.Support}
	if err := runRefund(ctx, pin, &res); err != nil {
		return order.View{}, err
	}
	if in.Support && res.Order.Status != order.StatusRefunded {
		// Nothing refunded (the payment's provider is not this worker's):
		// failed, so it shows, and a new ask starts it again.
		return res.Order, temporal.NewNonRetryableApplicationError("support refund: the order is "+string(res.Order.Status)+
			", not refunded", ErrTypeNotRefunded, nil)
	}
	if in.Support {
		actx := workflow.WithActivityOptions(ctx, unitOptions)
		rel := compensation.ReleaseInput{OrderID: in.OrderID, ItemID: res.Order.ItemID}
		if err := workflow.ExecuteActivity(actx, comp.ReleaseUnit, rel).Get(actx, nil); err != nil {
			return res.Order, err
		}
	}
	if len(res.RefundIDs) > 0 && res.Order.Status.Final() {
		nctx := workflow.WithLocalActivityOptions(ctx, notifyOptions)
		if err := workflow.ExecuteLocalActivity(nctx, acts.Notify, res.Order).Get(nctx, nil); err != nil {
			workflow.GetLogger(ctx).Warn("Notify failed; the API reads the order from the database", "error", err)
		}
	}
	workflow.GetLogger(ctx).Info("payment refund done", "order_id", in.OrderID, "payment_id", in.PaymentID,
		"refunds", res.RefundIDs, "support", in.Support)
	return res.Order, nil
}
