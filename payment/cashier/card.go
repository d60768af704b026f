package cashier

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// Card is the test provider's instant test card (testpay.Client.Pay): the
// payment succeeds at the provider now; a closed one comes back canceled.
type Card interface {
	Pay(ctx context.Context, paymentID string) (provider.Payment, error)
}

// Door is the buyer's pay at the door (payment.Desk).
type Door interface {
	Pay(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error)
}

// CardEventPrefix starts the event id of the test card's success as the
// door records it: card:<provider>:<payment id> (the saga's cancel records
// saga-cancel:…). A second pay is a repeat.
const CardEventPrefix = "card:"

// PayByCard is the buyer's POST …/pay under the test provider, with the
// door pay's contract: it checks the order out (opening its provider
// payment if none), pays it with the test card at the provider, and
// records the provider's confirmed success through the door's decision
// (store.ApplyPaymentEvent, judged by the provider's timestamp), so the
// answer is the door's: the paid order, or order.ErrNotPayable. The
// notification that follows is already_paid by the same payment: nothing
// is refunded. An order checkout refuses (already paid, closed, free) is
// answered by door, as before.
func (c *Cashier) PayByCard(ctx context.Context, card Card, door Door, orderID string, userID int64, receivedAt time.Time) (order.View, error) {
	co, err := c.Checkout(ctx, orderID, userID, receivedAt)
	if errors.Is(err, order.ErrNotPayable) {
		return door.Pay(ctx, orderID, userID, receivedAt)
	}
	if err != nil {
		return order.View{}, err
	}
	pay, err := card.Pay(ctx, co.PaymentID)
	switch {
	case pay.Status == provider.Canceled:
		return order.View{}, fmt.Errorf("order %s: its payment %s is closed: %w", orderID, co.PaymentID, order.ErrNotPayable)
	case err != nil:
		return order.View{}, fmt.Errorf("pay order %s by test card: %w", orderID, err)
	}
	r, err := c.decide(ctx, store.PaymentEvent{ID: CardEventPrefix + c.opts.Provider + ":" + pay.ID, Type: string(provider.PaymentSucceeded),
		Provider: c.opts.Provider, PaymentID: pay.ID, OrderID: pay.OrderID, Amount: pay.Amount, Currency: pay.Currency, At: pay.SucceededAt}, "test_card")
	if err != nil {
		return order.View{}, err
	}
	if r.Verdict == store.VerdictPaid {
		return r.Order.View(), nil
	}
	v, err := c.view(ctx, orderID) // a repeat, or the order paid before
	if err == nil && v.Status != order.StatusPaid {
		err = fmt.Errorf("order %s: the test card's success is %s: %w", orderID, r.Verdict, order.ErrNotPayable)
	}
	return v, err
}
