package cashier_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

type card struct {
	status provider.Status
	paid   []string
}

func (c *card) Pay(_ context.Context, id string) (provider.Payment, error) {
	c.paid = append(c.paid, id)
	p := provider.Payment{ID: id, OrderID: orderID, Amount: 999, Currency: "EUR", Status: c.status}
	if c.status == provider.Canceled {
		return p, errors.New("closed")
	}
	p.SucceededAt = time.Unix(1000, 0)
	return p, nil
}

type door struct{ pays int }

func (d *door) Pay(context.Context, string, int64, time.Time) (order.View, error) {
	d.pays++
	return order.View{Status: order.StatusPaid}, nil
}

// The buyer's pay under the test provider: checkout, the card at the
// provider, its success recorded through the door's decision under the
// card's event id and the provider's timestamp; the answer is the door's.
func TestPayByCard(t *testing.T) {
	ctx, now := context.Background(), time.Now()
	payBy := now.Add(time.Minute)
	row := store.Order{OrderID: orderID, UserID: 7, ItemID: 3, Status: order.StatusPendingPayment, PayBy: &payBy}
	st := &fakeStore{row: &row, item: store.Item{ID: 3, PriceCents: 999, Currency: "EUR"}}
	paid := row
	paid.Status = order.StatusPaid
	st.result = store.EventResult{Verdict: store.VerdictPaid, Order: paid}
	c, _, s, _ := newCashier(st, noViews{})
	k, d := &card{status: provider.Succeeded}, &door{}
	v, err := c.PayByCard(ctx, k, d, orderID, 7, now)
	if err != nil || v.Status != order.StatusPaid || len(s.settled) != 1 || d.pays != 0 || len(k.paid) != 1 || k.paid[0] != "pi_1" {
		t.Fatalf("pay: %+v %v; settled %d, door %d, card %v", v, err, len(s.settled), d.pays, k.paid)
	}
	e := st.events[0]
	if e.ID != "card:testpay:pi_1" || e.Type != string(provider.PaymentSucceeded) || e.Amount != 999 || e.Currency != "EUR" || !e.At.Equal(time.Unix(1000, 0)) {
		t.Fatalf("recorded %+v", e)
	}
	// Again: a repeat, answered by the row.
	st.result, st.row = store.EventResult{Verdict: store.VerdictRepeated}, &paid
	if v, err = c.PayByCard(ctx, k, d, orderID, 7, now); err != nil || v.Status != order.StatusPaid || len(s.settled) != 1 {
		t.Fatalf("second pay: %+v %v", v, err)
	}
	// A success the door cannot take (late) is refused.
	st.result, st.row = store.EventResult{Verdict: store.VerdictLate}, &row
	if _, err = c.PayByCard(ctx, k, d, orderID, 7, now); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("late: %v", err)
	}
	// A closed payment at the provider: not payable, nothing recorded.
	k.status, st.events = provider.Canceled, nil
	if _, err = c.PayByCard(ctx, k, d, orderID, 7, now); !errors.Is(err, order.ErrNotPayable) || len(st.events) != 0 {
		t.Fatalf("closed payment: %v, events %v", err, st.events)
	}
	// An order checkout refuses (here: paid at the door before, no payment) is the door's.
	st.payments, st.row = nil, &paid
	if v, err = c.PayByCard(ctx, k, d, orderID, 7, now); err != nil || d.pays != 1 || v.Status != order.StatusPaid {
		t.Fatalf("door's: %+v %v, door %d", v, err, d.pays)
	}
}
