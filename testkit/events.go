package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
)

// ShopEvent is an order event as a shop's consumer reads it, written from
// docs/events.schema.json alone.
type ShopEvent struct {
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
type Shop struct {
	t      *testing.T
	schema *jsonschema.Schema
	mu     sync.Mutex
	bodies map[string][]byte      // by event id: a duplicate must carry the same
	seen   map[string][]ShopEvent // by order, first deliveries in arrival order
	got    int                    // deliveries, duplicates included
}

func NewShop(t *testing.T, cfg config.RocketMQ, topic string) *Shop {
	t.Helper()
	queue.SetClientLogLevel("warn")
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join(RepoRoot(t), "docs", "events.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	s := &Shop{t: t, schema: sch, bodies: map[string][]byte{}, seen: map[string][]ShopEvent{}}
	var c rocketmq.PushConsumer
	for i := 0; ; i++ { // a fresh topic's route reaches the name server with the next broker registration
		c, err = rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
			consumer.WithCredentials(primitive.Credentials{AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey.Value()}),
			consumer.WithGroupName(Name(t, "shop")), consumer.WithInstance(Name(t, "shop-c")),
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

func (s *Shop) handle(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	for _, m := range msgs {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Body))
		if err == nil {
			err = s.schema.Validate(inst)
		}
		if err != nil {
			s.t.Errorf("event %s against the schema: %v", m.Body, err)
			continue
		}
		var e ShopEvent
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

// WaitFor waits until the shop has received every event id of want and at
// least deliveries messages; it returns the ids received.
func (s *Shop) WaitFor(want []string, deliveries int, within time.Duration) []string {
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

// OrderEventChanges are the event ids MySQL holds for the item's orders (the
// outbox), after checking they are what the rows say happened: one event
// per settled status, a REFUNDED one after the close it refunds.
func OrderEventChanges(t *testing.T, st *store.Store, itemID int64, refunded map[string]bool) []string {
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

// WaitPublished waits until no event is left unpublished.
func WaitPublished(t *testing.T, st *store.Store) {
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

// Received is how many distinct events the shop has.
func (s *Shop) Received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.bodies)
}

// Seen is each order's events as first delivered, in arrival order.
func (s *Shop) Seen() map[string][]ShopEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]ShopEvent, len(s.seen))
	for k, v := range s.seen {
		out[k] = slices.Clone(v)
	}
	return out
}

// Delivered is how many messages the shop took, duplicates included.
func (s *Shop) Delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}
