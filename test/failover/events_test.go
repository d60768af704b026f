package failover_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/testkit"
)

// Order events through TestBrokerOutage's broker outage and a MySQL restart
// after it (issue 30, item 3): changes made while the broker is down wait in
// the outbox and are published once it is back; the worker's publisher loses
// its lease with MySQL and takes it again. At the end the shop's consumer
// holds exactly the changes MySQL records (duplicates only with the same
// event id and body), each order's in order. MariaDB is stopped once the
// handoff story beside it is done (its API reads items from it).
func orderEventsThroughBrokerOutage(t *testing.T, p *party, handoffDone <-chan struct{}) {
	const units = 20
	e := newSagaEnv(t, units, 5*time.Minute) // the rest are canceled by their buyers, not left to pay_by
	ctx := context.Background()
	topic := testkit.Name(t, "events")
	if err := queue.EnsureTopic(ctx, e.cfg.RocketMQ, topic, 4); err != nil {
		t.Fatal(err)
	}
	e.env = append(e.env, "SECKILL_EVENTS_TOPIC="+topic, "SECKILL_EVENTS_POLL=100ms")
	shop := testkit.NewShop(t, e.cfg, topic)
	e.startWorker("worker")
	var ms []order.Message
	for i := range units {
		ms = append(ms, e.buy(int64(500+i)))
	}
	e.waitAll(ms, 2*time.Minute, "pending", pending)
	for _, m := range ms[:5] {
		e.pay(m)
	}
	for deadline := time.Now().Add(time.Minute); shop.Received() < 5; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first events did not arrive")
		}
	}

	down := ""
	t.Cleanup(func() {
		if down != "" { // always bring the service back, even when the test failed
			e.stack("start", down)
		}
	})
	stoppedAt := p.Down()
	for _, m := range ms[5:10] {
		e.pay(m)
	}
	for _, m := range ms[10:13] {
		if _, err := e.desk.Cancel(ctx, m.OrderID, m.UserID, time.Now()); err != nil {
			t.Fatalf("cancel %s: %v", m.OrderID, err)
		}
	}
	if un, err := e.st.UnpublishedEvents(ctx, 100); err != nil || len(un) < 8 {
		t.Fatalf("%d events wait while the broker is down (%v), want at least 8", len(un), err)
	}
	<-p.o.Back()
	t.Logf("the broker was down for %s", time.Since(stoppedAt).Round(time.Second))
	testkit.WaitPublished(t, e.st)

	<-handoffDone
	down = "mariadb"
	stackCmd(t, "stop", down)
	time.Sleep(20 * time.Second)
	stackCmd(t, "start", down)
	down = ""
	for _, m := range ms[13:16] {
		e.pay(m)
	}
	for _, m := range ms[16:] {
		if _, err := e.desk.Cancel(ctx, m.OrderID, m.UserID, time.Now()); err != nil {
			t.Fatalf("cancel %s: %v", m.OrderID, err)
		}
	}
	e.waitAll(ms, 4*time.Minute, "PAID or CANCELLED", final)
	want := testkit.OrderEventChanges(t, e.st, e.item.ID, nil)
	if got := shop.WaitFor(want, len(want), 2*time.Minute); !slices.Equal(got, want) {
		t.Fatalf("the shop received %v, MySQL recorded %v", got, want)
	}
	for orderID, evs := range shop.Seen() {
		if len(evs) != 1 || evs[0].Seq != 1 {
			t.Errorf("order %s: %+v", orderID, evs)
		}
	}
	testkit.WaitPublished(t, e.st)
	t.Logf("%d events, %d deliveries", len(want), shop.Delivered())
}
