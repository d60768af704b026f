package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// runPublisher runs an events publisher as `seckill worker` does, until the test ends.
func runPublisher(t *testing.T, p *pipeline, cfg config.Events) {
	t.Helper()
	pub, err := queue.NewKeyedProducer(p.cfg.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		events.New(p.st, events.Signed(pub, eventSigner(t, p.cfg)), cfg, events.NewMetrics(prometheus.NewRegistry()), p.log).Run(ctx)
	}()
	t.Cleanup(func() { stop(); <-done; _ = pub.Close() })
}

// eventSigner is the publisher's signer of cfg's events signing key.
func eventSigner(t *testing.T, cfg config.Config) *events.Signer {
	t.Helper()
	seed, err := cfg.Events.EventsSigningSeed()
	if err != nil {
		t.Fatal(err)
	}
	s, err := events.NewSigner(seed)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A small sale's order events reach a shop's consumer on the events topic
// exactly as MySQL records the changes: paid (at the door, some while still
// QUEUED), cancelled by the buyer, closed unpaid at pay_by, refunded after a
// close; none missing, none extra, each order's in its order, every body
// valid against docs/events.schema.json. Two publishers run (one holds the
// lease); a replay delivers everything again with the same event ids.
func TestOrderEventsReachTheShop(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	start := time.Now().Add(-time.Second)
	topic := testkit.Name(t, "events")
	if err := queue.EnsureTopic(ctx, p.cfg.RocketMQ, topic, 4); err != nil {
		t.Fatal(err)
	}
	cfg := config.Events{Topic: topic, Publish: true, Poll: 50 * time.Millisecond, Batch: 5, Parallel: 3}
	runPublisher(t, p, cfg)
	runPublisher(t, p, cfg)
	shop := testkit.NewShop(t, p.cfg, topic)

	// Unpaid orders close at pay_by + PayGrace. Each order is paid or canceled
	// as soon as it is bought: on a busy machine a second can pass between the
	// first purchase and the last.
	it := p.item(12, 3*time.Second)
	var paid, cancelled, unpaid []order.Message
	for i := range 12 {
		m := p.buy(it.ID, int64(3001+i))
		switch i % 3 {
		case 0:
			if _, err := p.pay(m); err != nil {
				t.Fatalf("pay %s: %v", m.OrderID, err)
			}
			paid = append(paid, m)
		case 1:
			if _, err := p.cancel(m); err != nil {
				t.Fatalf("cancel %s: %v", m.OrderID, err)
			}
			cancelled = append(cancelled, m)
		default:
			unpaid = append(unpaid, m)
		}
	}
	for _, m := range paid {
		p.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	}
	for _, m := range append(cancelled, unpaid...) {
		p.waitStatus(m.OrderID, order.StatusCancelled, 30*time.Second)
	}
	// Two closed orders refunded, as the saga's refund step records it.
	refunded := map[string]bool{}
	for i, m := range cancelled[:2] {
		pm, err := p.st.SavePayment(ctx, store.Payment{OrderID: m.OrderID, UserID: m.UserID, ItemID: it.ID, Provider: "testpay",
			ProviderPaymentID: fmt.Sprintf("pi_%d", i), Amount: 100, Currency: "EUR", PayBy: *m.PayBy})
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.st.BeginRefund(ctx, pm, "test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.st.FinishRefund(ctx, r, fmt.Sprintf("re_%d", i), store.RefundSucceeded); err != nil {
			t.Fatal(err)
		}
		refunded[m.OrderID] = true
	}

	want := testkit.OrderEventChanges(t, p.st, it.ID, refunded)
	if len(want) != 14 {
		t.Fatalf("%d changes, want 14", len(want))
	}
	if got := shop.WaitFor(want, len(want), time.Minute); !slices.Equal(got, want) {
		t.Fatalf("the shop received %v, MySQL recorded %v", got, want)
	}
	for orderID, evs := range shop.Seen() {
		for i, e := range evs {
			if e.Seq != i+1 {
				t.Errorf("order %s: its events stored on the topic as %+v", orderID, evs)
			}
		}
		if refunded[orderID] && (len(evs) != 2 || evs[1].Status != string(order.StatusRefunded) || evs[1].RefundID == "") {
			t.Errorf("refunded order %s: %+v", orderID, evs)
		}
	}
	delivered := shop.Delivered()
	testkit.WaitPublished(t, p.st)

	// A replay from before the sale: everything again, same ids and bodies.
	pub, err := queue.NewKeyedProducer(p.cfg.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	n, err := events.Replay(ctx, p.st, events.Signed(pub, eventSigner(t, p.cfg)), cfg, start)
	if err != nil || n != len(want) {
		t.Fatalf("replay sent %d (%v), want %d", n, err, len(want))
	}
	if got := shop.WaitFor(want, delivered+n, time.Minute); !slices.Equal(got, want) {
		t.Fatalf("after the replay the shop has %v", got)
	}

	// Anyone who can publish to the broker — with the order signing key, a
	// key of their own, or a genuine signature on another body — cannot make
	// an event the shop's recipe (docs/events.md) takes.
	fake := []byte(fmt.Sprintf(`{"event_id":"%s:PAID","order_id":"%s","seq":1,"buyer_id":1,"item_id":%d,"status":"PAID","reason":"","amount_minor":1,"currency":"EUR","payment_id":"","refund_id":"","occurred_at":"2026-12-07T00:00:00.000Z"}`,
		cancelled[0].OrderID, cancelled[0].OrderID, it.ID))
	mine, err := events.NewSigner([]byte("an attacker's own 32-byte seed!!"))
	if err != nil {
		t.Fatal(err)
	}
	genuine := eventSigner(t, p.cfg).Sign([]byte(`{"another":"body"}`))
	withOrderKey := map[string]string{queue.SignatureProperty: queue.NewSigner(p.cfg.RocketMQ).Sign(fake)}
	for _, props := range []map[string]string{withOrderKey, mine.Sign(fake), genuine} {
		if err := pub.SendEvent(ctx, topic, queue.Encoded{OrderID: cancelled[0].OrderID, Body: fake, EventID: cancelled[0].OrderID + ":PAID", Props: props}); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(time.Minute); len(shop.Rejected()) < 3; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the shop refused %d of the 3 forged events", len(shop.Rejected()))
		}
	}
	if got := shop.WaitFor(want, delivered+n, time.Second); !slices.Equal(got, want) {
		t.Fatalf("after the forgeries the shop has %v", got)
	}
}
