package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// shopEvent is an order event as a shop's consumer reads it, written from
// docs/events.schema.json alone.
type shopEvent struct {
	EventID    string `json:"event_id"`
	OrderID    string `json:"order_id"`
	Seq        int    `json:"seq"`
	Status     string `json:"status"`
	PaymentID  string `json:"payment_id"`
	RefundID   string `json:"refund_id"`
	OccurredAt string `json:"occurred_at"`
}

// shop is a test consumer of the order events topic, in the shop's shoes:
// every body valid against the schema, its event_id property the body's.
type shop struct {
	t      *testing.T
	schema *jsonschema.Schema
	mu     sync.Mutex
	bodies map[string][]byte      // by event id: a duplicate must carry the same
	seen   map[string][]shopEvent // by order, first deliveries in arrival order
	got    int                    // deliveries, duplicates included
}

func newShop(t *testing.T, cfg config.RocketMQ, topic string) *shop {
	t.Helper()
	queue.SetClientLogLevel("warn")
	sch, err := jsonschema.NewCompiler().Compile("../docs/events.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	s := &shop{t: t, schema: sch, bodies: map[string][]byte{}, seen: map[string][]shopEvent{}}
	var c rocketmq.PushConsumer
	for i := 0; ; i++ { // a fresh topic's route reaches the name server with the next broker registration
		c, err = rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
			consumer.WithCredentials(primitive.Credentials{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey.Value()}),
			consumer.WithGroupName(testkit.Name(t, "shop")), consumer.WithInstance(testkit.Name(t, "shop-c")),
			consumer.WithConsumerOrder(true), consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
		if err == nil {
			err = c.Subscribe(topic, consumer.MessageSelector{}, s.handle)
		}
		if err == nil {
			err = c.Start()
		}
		if err == nil || i == 20 {
			break
		}
		_ = c.Shutdown()
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown() })
	return s
}

func (s *shop) handle(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	for _, m := range msgs {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Body))
		if err == nil {
			err = s.schema.Validate(inst)
		}
		if err != nil {
			s.t.Errorf("event %s against the schema: %v", m.Body, err)
			continue
		}
		var e shopEvent
		if err := json.Unmarshal(m.Body, &e); err != nil {
			s.t.Errorf("event %s: %v", m.Body, err)
			continue
		}
		if p := m.GetProperty(queue.EventIDProperty); p != e.EventID || m.GetKeys() != e.OrderID {
			s.t.Errorf("event %s: property event_id %q, key %q", e.EventID, p, m.GetKeys())
		}
		s.mu.Lock()
		s.got++
		if prev, dup := s.bodies[e.EventID]; dup {
			if !bytes.Equal(prev, m.Body) {
				s.t.Errorf("duplicate of %s with another body: %s, then %s", e.EventID, prev, m.Body)
			}
		} else {
			s.bodies[e.EventID] = m.Body
			s.seen[e.OrderID] = append(s.seen[e.OrderID], e)
		}
		s.mu.Unlock()
	}
	return consumer.ConsumeSuccess, nil
}

// waitFor waits until the shop has received every event id of want and at
// least deliveries messages; it returns the ids received.
func (s *shop) waitFor(want []string, deliveries int, within time.Duration) []string {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		ids := make([]string, 0, len(s.bodies))
		for id := range s.bodies {
			ids = append(ids, id)
		}
		got := s.got
		s.mu.Unlock()
		slices.Sort(ids)
		if got >= deliveries && len(ids) >= len(want) {
			return ids
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("after %s the shop has %d events of %d (%d deliveries of %d)", within, len(ids), len(want), got, deliveries)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

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
		events.New(p.st, pub, cfg, events.NewMetrics(prometheus.NewRegistry()), p.log).Run(ctx)
	}()
	t.Cleanup(func() { stop(); <-done; _ = pub.Close() })
}

// mysqlChanges are the event ids MySQL holds for the item's orders (the
// outbox), after checking they are what the rows say happened: one event
// per settled status, a REFUNDED one after the close it refunds.
func mysqlChanges(t *testing.T, st *store.Store, itemID int64, refunded map[string]bool) []string {
	t.Helper()
	state, err := st.ReadItemState(context.Background(), itemID)
	if err != nil {
		t.Fatal(err)
	}
	var rows []store.OrderEvent
	if err := st.DB().Order("id").Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	var want, have []string
	for _, o := range state.Orders {
		if !o.Status.Final() {
			t.Fatalf("order %s is still %s", o.OrderID, o.Status)
		}
		want = append(want, order.EventID(o.OrderID, o.Status))
		if refunded[o.OrderID] {
			want = append(want, order.EventID(o.OrderID, order.StatusCancelled))
		}
	}
	for _, r := range rows {
		have = append(have, r.EventID)
	}
	slices.Sort(want)
	slices.Sort(have)
	if !slices.Equal(want, have) {
		t.Fatalf("outbox %v, want %v (from the order rows)", have, want)
	}
	return have
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
	shop := newShop(t, p.cfg.RocketMQ, topic)

	it := p.item(12, time.Second) // unpaid orders close at pay_by + PayGrace
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
			cancelled = append(cancelled, m)
		default:
			unpaid = append(unpaid, m)
		}
	}
	for _, m := range cancelled {
		if _, err := p.cancel(m); err != nil {
			t.Fatalf("cancel %s: %v", m.OrderID, err)
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

	want := mysqlChanges(t, p.st, it.ID, refunded)
	if len(want) != 14 {
		t.Fatalf("%d changes, want 14", len(want))
	}
	if got := shop.waitFor(want, len(want), time.Minute); !slices.Equal(got, want) {
		t.Fatalf("the shop received %v, MySQL recorded %v", got, want)
	}
	shop.mu.Lock()
	for orderID, evs := range shop.seen {
		for i, e := range evs {
			if e.Seq != i+1 {
				t.Errorf("order %s: its events arrived as %+v", orderID, evs)
			}
		}
		if refunded[orderID] && (len(evs) != 2 || evs[1].Status != string(order.StatusRefunded) || evs[1].RefundID == "") {
			t.Errorf("refunded order %s: %+v", orderID, evs)
		}
	}
	delivered := shop.got
	shop.mu.Unlock()
	waitPublished(t, p.st)

	// A replay from before the sale: everything again, same ids and bodies.
	pub, err := queue.NewKeyedProducer(p.cfg.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pub.Close() }()
	n, err := events.Replay(ctx, p.st, pub, cfg, start)
	if err != nil || n != len(want) {
		t.Fatalf("replay sent %d (%v), want %d", n, err, len(want))
	}
	if got := shop.waitFor(want, delivered+n, time.Minute); !slices.Equal(got, want) {
		t.Fatalf("after the replay the shop has %v", got)
	}
}

// waitPublished waits until no event is left unpublished.
func waitPublished(t *testing.T, st *store.Store) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		un, err := st.UnpublishedEvents(context.Background(), 1)
		if err == nil && len(un) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("events left unpublished: %+v %v", un, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
