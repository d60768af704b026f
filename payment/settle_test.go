package payment_test

import (
	"context"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

// An order a provider's notification paid is published and its saga woken
// as after a door pay; a paid QUEUED order is published, not woken.
func TestSettleFollowsAPaidOrderAsAPay(t *testing.T) {
	st, sg := &fakeStatuses{}, &fakeSagas{signals: make(chan string, 4)}
	d, _ := newDesk(t, &fakeOrders{}, st, nil, sg, payment.Options{})
	now := time.Now()
	queued := store.Order{OrderID: "Q1", UserID: 7, ItemID: 1, Status: order.StatusQueued, PayBy: payBy(), PaidAt: &now}
	if v := d.Settle(context.Background(), queued); v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("settle of a paid QUEUED order %+v", v)
	}
	v := d.Settle(context.Background(), store.Order{OrderID: "P1", UserID: 7, ItemID: 1, Status: order.StatusPaid, PayBy: payBy()})
	if v.Status != order.StatusPaid {
		t.Fatalf("settle %+v", v)
	}
	select {
	case got := <-sg.signals:
		if got != workflows.SignalPay+" P1" {
			t.Fatalf("signal %q", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("saga not woken")
	}
	if st.published() != 2 || len(sg.signals) != 0 {
		t.Fatalf("published %d, %d extra signals", st.published(), len(sg.signals))
	}
}
