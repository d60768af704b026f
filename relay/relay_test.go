package relay_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/relay"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// fakePub records successful sends and fails when told to.
type fakePub struct {
	mu        sync.Mutex
	sent      map[string]int
	down      atomic.Bool
	failEvery int64 // when set, the 1st send and every failEvery-th after it fail
	calls     atomic.Int64
	failures  atomic.Int64
	batches   atomic.Int64
	largest   atomic.Int64
}

func newFakePub() *fakePub { return &fakePub{sent: make(map[string]int)} }

// PublishOrders stores all of a batch or nothing; each body must be the
// order's message as the reserve script wrote it.
func (p *fakePub) PublishOrders(ctx context.Context, ms []queue.Encoded) error {
	for _, m := range ms {
		if d, err := order.DecodeMessage(m.Body); err != nil || d.OrderID != m.OrderID {
			return fmt.Errorf("message keyed %s: body %q: %v", m.OrderID, m.Body, err)
		}
	}
	if n := p.calls.Add(1); p.down.Load() || p.failEvery > 0 && n%p.failEvery == 1 {
		p.failures.Add(1)
		return errors.New("broker unavailable")
	}
	p.batches.Add(1)
	if n := int64(len(ms)); n > p.largest.Load() {
		p.largest.Store(n)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range ms {
		p.sent[m.OrderID]++
	}
	return nil
}

func (p *fakePub) counts() (distinct, total int, dups []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, n := range p.sent {
		total += n
		if n > 1 {
			dups = append(dups, id)
		}
	}
	return len(p.sent), total, dups
}

type items []int64

// ListItems: every item's sale runs for another day.
func (i items) ListItems(context.Context) ([]store.Item, error) {
	return saleItems(i, 24*time.Hour), nil
}

func saleItems(ids []int64, endsIn time.Duration) []store.Item {
	out := make([]store.Item, len(ids))
	for n, id := range ids {
		out[n] = store.Item{ID: id, EndAt: time.Now().Add(endsIn)}
	}
	return out
}

type backlogMetrics struct {
	peak    atomic.Int64
	reports atomic.Int64 // one per round of an item loop, and per retry
}

func (m *backlogMetrics) Published(int)  {}
func (m *backlogMetrics) PublishFailed() {}

func (m *backlogMetrics) Backlog(_ int64, n int64) {
	m.reports.Add(1)
	for {
		p := m.peak.Load()
		if n <= p || m.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func reserve(t *testing.T, s *stock.Store, item int64, from, n int) []string {
	t.Helper()
	ctx := context.Background()
	ids := make([]string, 0, n)
	for u := from; u < from+n; u++ {
		m := order.Message{OrderID: order.NewID(), ItemID: item, UserID: int64(u), ReservedAt: time.Now().UTC()}
		if _, err := s.Reserve(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, m.OrderID)
	}
	return ids
}

func start(t *testing.T, r *relay.Relay) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishedOnce waits until the fake has n distinct orders and the items'
// outboxes are empty, and fails unless each order was sent exactly once. An
// empty outbox is the barrier: every entry is acknowledged and deleted, so no
// relay can read or claim it again, and a relay sends an entry before it
// acknowledges it, so any duplicate has been counted by then.
func publishedOnce(t *testing.T, p *fakePub, ob *outbox.Stream, its []int64, n int, within time.Duration, what string) {
	t.Helper()
	waitFor(t, within, what, func() bool {
		if d, _, _ := p.counts(); d != n {
			return false
		}
		for _, item := range its {
			if left, err := ob.Len(context.Background(), item); err != nil || left != 0 {
				return false
			}
		}
		return true
	})
	if d, total, dups := p.counts(); d != n || total != n {
		t.Fatalf("%s: distinct %d total %d (want %d each), duplicates %v", what, d, total, n, dups)
	}
}

func opts() config.Relay {
	return config.Relay{Batch: 16, ClaimAfter: 400 * time.Millisecond, Discover: 100 * time.Millisecond,
		FlushTimeout: 2 * time.Second, Parallel: 2, SendBatch: 1, RetireAfter: time.Minute}
}

// newRelay returns a relay whose reads block 100 ms and whose backoff stops
// at 200 ms (m nil: a backlogMetrics nobody reads).
func newRelay(t *testing.T, ob relay.Outbox, pub relay.Publisher, items relay.ItemLister, o config.Relay, consumer string, m relay.Metrics) *relay.Relay {
	t.Helper()
	if m == nil {
		m = &backlogMetrics{}
	}
	r, err := relay.New(ob, pub, items, o, consumer, m, testkit.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	r.SetTimings(100*time.Millisecond, 200*time.Millisecond)
	return r
}

// A setting left at zero is refused: its default lives in config alone.
func TestRelayRefusesAMissingOption(t *testing.T) {
	o := opts()
	o.Parallel = 0
	if _, err := relay.New(nil, nil, nil, o, "a", &backlogMetrics{}, testkit.Logger(t)); err == nil {
		t.Fatal("want an error for Parallel 0")
	}
	if _, err := relay.New(nil, nil, nil, opts(), "a", nil, testkit.Logger(t)); err == nil {
		t.Fatal("want an error for no metrics")
	}
}

func TestRelayPublishesEveryEntryOnceDespiteFailures(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	for _, item := range []int64{1, 2} {
		if _, err := s.Load(ctx, item, 100); err != nil {
			t.Fatal(err)
		}
	}
	pub := newFakePub()
	pub.failEvery = 3 // a third of the sends, the first among them
	start(t, newRelay(t, ob, pub, items{1, 2}, opts(), "a", nil))
	reserve(t, s, 1, 1, 60)
	reserve(t, s, 2, 1, 40)
	publishedOnce(t, pub, ob, items{1, 2}, 100, 10*time.Second, "100 messages")
	if pub.failures.Load() == 0 {
		t.Fatal("the fake never failed; the test proves nothing")
	}
	for _, item := range []int64{1, 2} {
		if n, _ := ob.Len(ctx, item); n != 0 {
			t.Fatalf("item %d outbox still has %d entries", item, n)
		}
	}
}

func TestRelayClaimsWhatADeadInstanceLeft(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 7, 100); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, 7, 1, 10)
	// An instance received the entries and died before publishing them.
	if err := ob.EnsureGroup(ctx, 7, "relay"); err != nil {
		t.Fatal(err)
	}
	got, err := ob.Read(ctx, 7, "relay", "dead", 100, 0, false)
	if err != nil || len(got) != 10 {
		t.Fatalf("dead consumer read %d (%v)", len(got), err)
	}
	pub := newFakePub()
	start(t, newRelay(t, ob, pub, items{7}, opts(), "alive", nil))
	publishedOnce(t, pub, ob, items{7}, 10, 5*time.Second, "claimed entries")
}

func TestRelayResumesItsOwnPendingEntries(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 3, 100); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, 3, 1, 5)
	_ = ob.EnsureGroup(ctx, 3, "relay")
	if got, _ := ob.Read(ctx, 3, "relay", "same-name", 100, 0, false); len(got) != 5 {
		t.Fatal("setup")
	}
	pub := newFakePub()
	o := opts()
	o.ClaimAfter = time.Hour // only the pending re-read can find them
	start(t, newRelay(t, ob, pub, items{3}, o, "same-name", nil))
	waitFor(t, 5*time.Second, "own pending entries", func() bool { d, _, _ := pub.counts(); return d == 5 })
}

func TestRelayRetriesWhileTheBrokerIsDown(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 5, 100); err != nil {
		t.Fatal(err)
	}
	pub := newFakePub()
	pub.down.Store(true)
	m := &backlogMetrics{}
	start(t, newRelay(t, ob, pub, items{5}, opts(), "a", m))
	reserve(t, s, 5, 1, 30)
	// More failures than entries: the relay retried while the broker was
	// down, and reported the whole backlog meanwhile.
	waitFor(t, 10*time.Second, "retries and a backlog of 30 while down", func() bool {
		return pub.failures.Load() > 30 && m.peak.Load() >= 30
	})
	pub.down.Store(false)
	publishedOnce(t, pub, ob, items{5}, 30, 10*time.Second, "backlog drained")
}

func TestLiveRelayKeepsItsEntriesFromBeingClaimed(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 9, 100); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, 9, 1, 8)
	pubA := newFakePub()
	pubA.down.Store(true)
	start(t, newRelay(t, ob, pubA, items{9}, opts(), "a", nil))
	waitFor(t, 5*time.Second, "A to take the entries", func() bool { return pubA.failures.Load() >= 8 })
	// The control: one more entry, received by a dead instance after A took
	// its eight (A, retrying them, reads nothing new). Once B has claimed it,
	// B ran a claim pass in which A's entries, older, would have been idle
	// past ClaimAfter too, had A not kept them fresh.
	abandoned := reserve(t, s, 9, 100, 1)[0]
	if got, err := ob.Read(ctx, 9, "relay", "dead", 100, 0, false); err != nil || len(got) != 1 || got[0].OrderID != abandoned {
		t.Fatalf("dead consumer read %+v (%v), want only the control entry", got, err)
	}
	pubB := newFakePub()
	start(t, newRelay(t, ob, pubB, items{9}, opts(), "b", nil))
	waitFor(t, 10*time.Second, "B to claim the dead instance's entry", func() bool {
		pubB.mu.Lock()
		defer pubB.mu.Unlock()
		return pubB.sent[abandoned] > 0
	})
	if d, total, _ := pubB.counts(); d != 1 || total != 1 {
		t.Fatalf("B published %d orders (%d sends), want only the dead instance's one: it claimed from a live relay", d, total)
	}
	pubA.down.Store(false)
	publishedOnce(t, pubA, ob, items{9}, 8, 5*time.Second, "A to publish")
}

func TestRelayFlushesOnShutdown(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 4, 100); err != nil {
		t.Fatal(err)
	}
	pub := newFakePub()
	m := &backlogMetrics{}
	r := newRelay(t, ob, pub, items{4}, opts(), "a", m)
	r.SetTimings(5*time.Second, 200*time.Millisecond) // the loop is parked in a long read when stopped
	stop := start(t, r)
	// Two rounds reported (its own pending entries, then a claim pass): the
	// item loop's next step is the long read.
	waitFor(t, 5*time.Second, "the item loop's first rounds", func() bool { return m.reports.Load() >= 2 })
	ids := reserve(t, s, 4, 1, 20)
	stop()
	if d, _, _ := pub.counts(); d != len(ids) {
		t.Fatalf("after shutdown %d of %d published", d, len(ids))
	}
}

func TestRelayBatchesSendsAndPublishesEveryEntryOnce(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 1, 1000); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, 1, 1, 300) // a backlog before the relay starts: full batches
	pub := newFakePub()
	pub.failEvery = 3 // a third of the sends, the first among them
	o := opts()
	o.Batch, o.SendBatch, o.Linger = 64, 32, 5*time.Millisecond
	start(t, newRelay(t, ob, pub, items{1}, o, "a", nil))
	reserve(t, s, 1, 301, 200)
	publishedOnce(t, pub, ob, items{1}, 500, 10*time.Second, "500 messages")
	if pub.failures.Load() == 0 {
		t.Fatal("the fake never failed; the test proves nothing")
	}
	if pub.largest.Load() < 2 || pub.largest.Load() > 32 || pub.batches.Load() >= 500 {
		t.Fatalf("batches %d, largest %d: want batched sends of at most 32", pub.batches.Load(), pub.largest.Load())
	}
	if n, _ := ob.Len(ctx, 1); n != 0 {
		t.Fatalf("outbox still has %d entries", n)
	}
}

// The outbox stream is lost (Redis restarted without its data, a key deleted)
// and re-created by the next reservation without the relay's group: the relay
// makes the group again and publishes what follows, without a restart.
func TestRelayRecoversFromALostGroup(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 1, 100); err != nil {
		t.Fatal(err)
	}
	pub := newFakePub()
	start(t, newRelay(t, ob, pub, items{1}, opts(), "a", nil))
	reserve(t, s, 1, 1, 5)
	publishedOnce(t, pub, ob, items{1}, 5, 10*time.Second, "5 messages before the loss")
	if err := rdb.Del(ctx, s.ItemKeys(1).Outbox).Err(); err != nil {
		t.Fatal(err)
	}
	reserve(t, s, 1, 100, 5) // XADD re-creates the stream, without any group
	publishedOnce(t, pub, ob, items{1}, 10, 10*time.Second, "5 more after the loss")
}

// endedItems: sales that ended an hour ago.
type endedItems []int64

func (i endedItems) ListItems(context.Context) ([]store.Item, error) {
	return saleItems(i, -time.Hour), nil
}

// Readers of closed items retire once their outbox is empty, and a closed
// item's leftover backlog still gets a reader that publishes it first.
func TestRelayRetiresReadersOfClosedItems(t *testing.T) {
	testkit.Integration(t)
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ob := outbox.New(rdb, prefix)
	ctx := context.Background()
	for _, item := range []int64{21, 22} {
		if _, err := s.Load(ctx, item, 100); err != nil {
			t.Fatal(err)
		}
	}
	reserve(t, s, 22, 1, 7) // item 22 closed with a backlog
	pub := newFakePub()
	r := newRelay(t, ob, pub, endedItems{21, 22}, opts(), "a", nil)
	start(t, r)
	publishedOnce(t, pub, ob, []int64{21, 22}, 7, 10*time.Second, "the closed item's backlog")
	waitFor(t, 10*time.Second, "every reader retired", func() bool { return r.Watching() == 0 })
	if n, _ := ob.Len(ctx, 22); n != 0 {
		t.Fatalf("outbox of the closed item holds %d entries", n)
	}
	// A buyer of a closed item is refused at the door; still, an entry that
	// appears later (a repair) gets a reader again at the next discovery.
	reserve(t, s, 21, 1, 1)
	publishedOnce(t, pub, ob, []int64{21, 22}, 8, 10*time.Second, "a late entry of a closed item")
}
