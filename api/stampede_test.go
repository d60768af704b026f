package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/relay"
	"github.com/seckill/seckill/testkit"
)

// TestStampede: 2,000 buyers (a tenth of them sending the same request
// several times) race for 100 units through the real HTTP server, Redis,
// MySQL, the outbox relay and RocketMQ.
func TestStampede(t *testing.T) {
	if testing.Short() {
		t.Skip("stampede needs the whole stack")
	}
	const (
		buyers = 2000
		units  = 100
	)
	env := testkit.Config(t)
	rmq := env.RocketMQ
	rmq.Topic = testkit.Name(t, "orders")
	rmq.ProducerGroup = testkit.Name(t, "pg")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := queue.EnsureTopic(ctx, rmq, rmq.Topic, 4); err != nil {
		t.Fatalf("RocketMQ (run scripts/stack up): %v", err)
	}
	producer, err := queue.NewProducer(rmq)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producer.Close() })

	// The relay reads the harness's outbox, known once the harness is built;
	// the server learns of items through it from the start.
	var watch lateWatcher
	var metrics *api.Metrics
	sends := &countingPublisher{Producer: producer}
	h := newHarness(t, func(_ *config.API, d *api.Deps) {
		d.Relay, metrics = &watch, d.Metrics
	})
	rc := testkit.Config(t).API.Relay
	rc.Discover = 200 * time.Millisecond
	rel, err := relay.New(h.ob, sends, h.db, rc, "stampede", relay.NewMetrics(metrics.Registry()), testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	watch.set(rel)
	rctx, stopRelay := context.WithCancel(context.Background())
	relayDone := make(chan struct{})
	go func() { rel.Run(rctx); close(relayDone) }()
	t.Cleanup(func() { stopRelay(); <-relayDone })

	// Consume the topic from the start with a group of our own.
	var (
		msgMu    sync.Mutex
		messages = map[string]int{}
		total    atomic.Int64
	)
	consumer, err := queue.NewConsumer(queue.ConsumerOptions{NameServers: rmq.NameServers,
		Group: testkit.Name(t, "cg"), Topic: rmq.Topic, FromFirstOffset: true, MaxReconsume: 16, Goroutines: 20, Log: testkit.Logger(t)},
		func(_ context.Context, m *primitive.MessageExt) error {
			om, err := order.DecodeMessage(m.Body)
			if err != nil {
				t.Errorf("bad message %q: %v", m.Body, err)
				return nil
			}
			if m.GetKeys() != om.OrderID {
				t.Errorf("message key %q != order id %s", m.GetKeys(), om.OrderID)
			}
			msgMu.Lock()
			messages[om.OrderID]++
			msgMu.Unlock()
			total.Add(1)
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = consumer.Close() })

	item := h.activeItem(units)
	path := fmt.Sprintf("%s/api/v1/seckill/%d", h.ts.URL, item)

	// Watch Redis stock while the sale runs.
	stockKey := h.stk.ItemKeys(item).Stock
	minLeft := atomic.Int64{}
	minLeft.Store(units)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for watchCtx.Err() == nil {
			if n, err := h.rdb.Get(watchCtx, stockKey).Int64(); err == nil && n < minLeft.Load() {
				minLeft.Store(n)
			}
		}
	}()

	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, MaxConnsPerHost: 512}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	type answer struct {
		user    int64
		status  int
		orderID string
	}
	answers := make(chan answer, buyers*5)
	tokens := make([]string, buyers)
	for i := range tokens {
		tokens[i] = h.buyer(int64(100000 + i))
	}
	startGun := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < buyers; i++ {
		repeats := 1
		if i%10 == 0 {
			repeats = 2 + i%4 // a tenth sends the same request 2-5 times at once
		}
		for r := 0; r < repeats; r++ {
			wg.Go(func() {
				<-startGun
				req, _ := http.NewRequest("POST", path, nil)
				req.Header.Set("Authorization", "Bearer "+tokens[i])
				res, err := client.Do(req)
				if err != nil {
					t.Errorf("buyer %d: %v", i, err)
					return
				}
				b, _ := io.ReadAll(res.Body)
				_ = res.Body.Close()
				a := answer{user: int64(100000 + i), status: res.StatusCode}
				if res.StatusCode == http.StatusAccepted {
					var body struct {
						OrderID string `json:"order_id"`
					}
					_ = json.Unmarshal(b, &body)
					a.orderID = body.OrderID
				}
				answers <- a
			})
		}
	}
	began := time.Now()
	close(startGun)
	wg.Wait()
	saleTook := time.Since(began)
	close(answers)
	stopWatch()
	<-watchDone

	accepted := map[int64]string{}
	byStatus := map[int]int{}
	for a := range answers {
		byStatus[a.status]++
		switch a.status {
		case http.StatusAccepted:
			if prev, dup := accepted[a.user]; dup {
				t.Errorf("buyer %d got two units: %s and %s", a.user, prev, a.orderID)
			}
			accepted[a.user] = a.orderID
		case http.StatusGone, http.StatusConflict:
		default:
			t.Errorf("unexpected status %d for buyer %d", a.status, a.user)
		}
	}
	t.Logf("sale of %d units to %d buyers took %v; answers by status %v", units, buyers, saleTook, byStatus)
	if len(accepted) != units || byStatus[http.StatusAccepted] != units {
		t.Fatalf("%d answers were 202 (%d buyers), want %d", byStatus[http.StatusAccepted], len(accepted), units)
	}
	if left, err := h.stk.Left(ctx, item); err != nil || left != 0 {
		t.Fatalf("redis stock ends at %d (%v), want 0", left, err)
	}
	if minLeft.Load() < 0 {
		t.Fatalf("redis stock went down to %d", minLeft.Load())
	}
	k := h.stk.ItemKeys(item)
	if n := h.rdb.HLen(ctx, k.Buyers).Val(); n != units {
		t.Fatalf("%d buyer marks, want %d", n, units)
	}

	// Exactly one message per reserved unit reaches the topic. Once the
	// units arrived, the relay is stopped: what it sent is then final, and
	// the consumer having received all of it is the barrier after which no
	// duplicate can still be on its way.
	deadline := time.Now().Add(90 * time.Second)
	for total.Load() < units && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	stopRelay()
	<-relayDone
	sent := sends.total()
	for total.Load() < sent && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if sent != units {
		t.Fatalf("the relay sent %d messages, want %d", sent, units)
	}
	msgMu.Lock()
	defer msgMu.Unlock()
	t.Logf("%d messages on the topic %v after the sale began", total.Load(), time.Since(began).Round(time.Millisecond))
	if total.Load() != units || len(messages) != units {
		t.Fatalf("%d messages with %d distinct order ids, want %d and %d", total.Load(), len(messages), units, units)
	}
	for _, id := range accepted {
		if messages[id] != 1 {
			t.Fatalf("order %s has %d messages", id, messages[id])
		}
	}
	if n, _ := h.ob.Len(ctx, item); n != 0 {
		t.Fatalf("outbox still holds %d entries", n)
	}
}

// countingPublisher counts the messages the broker accepted from the relay.
type countingPublisher struct {
	*queue.Producer
	n atomic.Int64
}

func (p *countingPublisher) PublishOrder(ctx context.Context, m order.Message) error {
	err := p.Producer.PublishOrder(ctx, m)
	if err == nil {
		p.n.Add(1)
	}
	return err
}

func (p *countingPublisher) PublishOrders(ctx context.Context, ms []queue.Encoded) error {
	err := p.Producer.PublishOrders(ctx, ms)
	if err == nil {
		p.n.Add(int64(len(ms)))
	}
	return err
}

func (p *countingPublisher) total() int64 { return p.n.Load() }

// lateWatcher forwards to a relay set after the server was built.
type lateWatcher struct {
	mu sync.Mutex
	w  api.Watcher
}

func (l *lateWatcher) set(w api.Watcher) {
	l.mu.Lock()
	l.w = w
	l.mu.Unlock()
}

func (l *lateWatcher) Watch(itemID int64) {
	l.mu.Lock()
	w := l.w
	l.mu.Unlock()
	if w != nil {
		w.Watch(itemID)
	}
}
