package payment

import (
	"context"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// Settle follows an order a verified provider notification just paid (the
// row already written, store.ApplyPaymentEvent) as a door pay is followed:
// its view published for GET and the event streams, its saga woken (not a
// paid QUEUED row's: the saga makes it PAID when it takes the unit).
func (d *Desk) Settle(ctx context.Context, row store.Order) order.View {
	v, _ := d.after(ctx, row, true, nil, workflows.SignalPay, !row.PaidQueued())
	return v
}
