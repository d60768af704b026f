// Package workflows holds the order saga (OrderSaga) and the client that
// starts and wakes it; this file declares every name a caller needs.
package workflows

import (
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
)

// Names shared by the starter, the worker, the API and support tooling.
const (
	WorkflowType = "OrderSaga"
	// SignalPay and SignalCancel wake the saga after the API recorded a pay
	// or cancel on the order row (docs/runbook.md). No payload.
	SignalPay    = "pay"
	SignalCancel = "cancel"
	QueryStatus  = "status" // the order view as the saga sees it
)

// RefundWorkflowType refunds a payment that succeeded after its order's
// saga could take it (PaymentRefund).
const RefundWorkflowType = "PaymentRefund"

// RefundWorkflowID is the ID of a payment's refund workflow: one per
// provider payment, so a resent notification never refunds twice.
func RefundWorkflowID(providerPaymentID string) string { return "refund-" + providerPaymentID }

// WorkflowID is the ID of an order's saga: one saga per order.
func WorkflowID(orderID string) string { return "order-" + orderID }

// Search attributes support staff filter by (registered by scripts/stack).
var (
	SearchItemID      = temporal.NewSearchAttributeKeyInt64("SeckillItemId")
	SearchUserID      = temporal.NewSearchAttributeKeyInt64("SeckillUserId")
	SearchOrderStatus = temporal.NewSearchAttributeKeyKeyword("SeckillOrderStatus")
)

// Input starts one saga: the order's queue message, embedded. Older sagas
// also carry "version": 2, which nothing reads.
type Input struct {
	order.Message
	// Payments: payments go through a provider (SECKILL_PAYMENT_PROVIDER is
	// not door): the saga cancels the order's provider payment before it
	// closes the order and refunds what must go back. Absent in sagas
	// started before these steps, which replay without them.
	Payments bool `json:"payments,omitempty"`
}
