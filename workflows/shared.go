// Package workflows holds the order saga (OrderSaga) and the client that
// starts and wakes it. Every name a caller needs (workflow type and ID,
// signal and query names, search attributes) is declared in this file.
package workflows

import (
	"go.temporal.io/sdk/temporal"

	"github.com/seckill/seckill/order"
)

// Names shared by the starter, the worker, the API and support tooling.
const (
	WorkflowType = "OrderSaga"
	// SignalPay and SignalCancel wake the saga after the API recorded the
	// buyer's pay or cancel on the order row at the door; support staff may
	// send them by hand (docs/runbook.md). Neither carries a payload.
	SignalPay    = "pay"
	SignalCancel = "cancel"
	QueryStatus  = "status" // the order view as the saga sees it
)

// WorkflowID is the ID of an order's saga: one saga per order.
func WorkflowID(orderID string) string { return "order-" + orderID }

// Search attributes support staff filter by (registered on the server by
// scripts/stack: SeckillItemId=Int SeckillUserId=Int SeckillOrderStatus=Keyword).
var (
	SearchItemID      = temporal.NewSearchAttributeKeyInt64("SeckillItemId")
	SearchUserID      = temporal.NewSearchAttributeKeyInt64("SeckillUserId")
	SearchOrderStatus = temporal.NewSearchAttributeKeyKeyword("SeckillOrderStatus")
)

// Input starts one saga: the queue message of the order, embedded, so the
// JSON is the message's fields. Sagas started before this code also carry
// "version": 2, which nothing reads; a future saga version that must branch
// on replay would bring the field back with a value above 2.
type Input struct {
	order.Message
}
