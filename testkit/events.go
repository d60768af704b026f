package testkit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

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

// Shop is a test consumer of the order events topic, in the shop's shoes:
// every body valid against the schema, its event_id property the body's, a
// duplicate the same body. It consumes concurrently (the library's orderly
// consumer races under -race), so an order's events are ordered by where the
// broker stored them: one queue, offsets rising with seq.
type Shop struct {
	t        *testing.T
	schema   *jsonschema.Schema
	keys     map[string]ed25519.PublicKey // the published keys, by key id
	mu       sync.Mutex
	first    map[string]stored // by event id: its first place on the topic
	got      int               // deliveries, duplicates included
	rejected []string          // bodies refused by docs/events.md's recipe
}

type stored struct {
	e      ShopEvent
	body   []byte
	queue  int
	offset int64
}

// NewShop starts a consumer group of its own on topic, from its first
// offset, verifying each message with the keys the API publishes for cfg
// (config.Events.EventKeys: GET /api/v1/events/keys).
func NewShop(t *testing.T, full config.Config, topic string) *Shop {
	t.Helper()
	cfg := full.RocketMQ
	queue.SetClientLogLevel("warn")
	sch, err := jsonschema.NewCompiler().Compile(filepath.Join(RepoRoot(t), "docs", "events.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := full.Events.EventKeys()
	if err != nil {
		t.Fatal(err)
	}
	s := &Shop{t: t, schema: sch, first: map[string]stored{}, keys: map[string]ed25519.PublicKey{}}
	for _, k := range pubs {
		h := sha256.Sum256(k) // the key id, as docs/events.md says: the first 8 bytes of its SHA-256, in hex
		s.keys[hex.EncodeToString(h[:8])] = k
	}
	opts := queue.ConsumerOptions{NameServers: cfg.NameServers, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey,
		Group: Name(t, "shop"), Topic: topic, MaxReconsume: 3, Goroutines: 4, FromFirstOffset: true,
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	var c *queue.Consumer
	for i := 0; ; i++ { // a fresh topic's route reaches the name server with the next broker registration
		if c, err = queue.NewConsumer(opts, s.handle); err == nil || i == 20 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return s
}

// verified is docs/events.md's recipe, with nothing but the standard
// library: the key the message names, among the published ones, verifies
// the base64 signature of the body.
func (s *Shop) verified(m *primitive.MessageExt) bool {
	key, ok := s.keys[m.GetProperty("seckill-event-key")]
	sig, err := base64.StdEncoding.DecodeString(m.GetProperty("seckill-event-signature"))
	return ok && err == nil && ed25519.Verify(key, m.Body, sig)
}

// Rejected are the bodies the recipe refused, in arrival order.
func (s *Shop) Rejected() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.rejected)
}

func (s *Shop) handle(_ context.Context, m *primitive.MessageExt) error {
	if !s.verified(m) {
		s.mu.Lock()
		s.rejected = append(s.rejected, string(m.Body))
		s.mu.Unlock()
		return nil // a forgery: not the shop's event
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(m.Body))
	if err == nil {
		err = s.schema.Validate(inst)
	}
	var e ShopEvent
	if err == nil {
		err = json.Unmarshal(m.Body, &e)
	}
	if err != nil {
		s.t.Errorf("event %s against the schema: %v", m.Body, err)
		return nil
	}
	if p := m.GetProperty(queue.EventIDProperty); p != e.EventID || m.GetKeys() != e.OrderID {
		s.t.Errorf("event %s: property event_id %q, key %q", e.EventID, p, m.GetKeys())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.got++
	here := stored{e: e, body: m.Body, queue: m.Queue.QueueId, offset: m.QueueOffset}
	prev, dup := s.first[e.EventID]
	switch {
	case !dup:
		s.first[e.EventID] = here
	case !bytes.Equal(prev.body, m.Body):
		s.t.Errorf("duplicate of %s with another body: %s, then %s", e.EventID, prev.body, m.Body)
	case here.queue == prev.queue && here.offset < prev.offset:
		s.first[e.EventID] = here
	}
	return nil
}

// WaitFor waits until the shop has received every event id of want and at
// least deliveries messages; it returns the ids received.
func (s *Shop) WaitFor(want []string, deliveries int, within time.Duration) []string {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		s.mu.Lock()
		ids := make([]string, 0, len(s.first))
		for id := range s.first {
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
	return len(s.first)
}

// Seen is each order's events in the order the broker stored their first
// copies; an order whose events are not on one queue is an error.
func (s *Shop) Seen() map[string][]ShopEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	byOrder := map[string][]stored{}
	for _, st := range s.first {
		byOrder[st.e.OrderID] = append(byOrder[st.e.OrderID], st)
	}
	out := make(map[string][]ShopEvent, len(byOrder))
	for id, sts := range byOrder {
		slices.SortFunc(sts, func(a, b stored) int { return int(a.offset - b.offset) })
		for _, st := range sts {
			if st.queue != sts[0].queue {
				s.t.Errorf("order %s: events on queues %d and %d", id, sts[0].queue, st.queue)
			}
			out[id] = append(out[id], st.e)
		}
	}
	return out
}

// Delivered is how many messages the shop took, duplicates included.
func (s *Shop) Delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}
