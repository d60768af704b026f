// Package relay moves reservations from the Redis outbox streams to RocketMQ
// (docs/handoff.md states the guarantees).
package relay

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
)

// Publisher sends order messages in one request (queue.Producer).
type Publisher interface {
	PublishOrders(ctx context.Context, ms []queue.Encoded) error
}

// ItemLister lists the items whose outboxes the relay watches (store.Store).
type ItemLister interface {
	ListItems(ctx context.Context) ([]store.Item, error)
}

// Metrics receives the relay's counters (Counters).
type Metrics interface {
	Published(n int)
	PublishFailed()
	Backlog(itemID int64, entries int64)
}

const group = "relay"

type Outbox interface {
	EnsureGroup(ctx context.Context, itemID int64, group string) error
	Read(ctx context.Context, itemID int64, group, consumer string, count int64, block time.Duration, pending bool) ([]outbox.Entry, error)
	Claim(ctx context.Context, itemID int64, group, consumer string, minIdle time.Duration, count int64) ([]outbox.Entry, error)
	Touch(ctx context.Context, itemID int64, group, consumer string, ids ...string) error
	Ack(ctx context.Context, itemID int64, group string, ids ...string) error
	Len(ctx context.Context, itemID int64) (int64, error)
}

// Relay publishes the outboxes of all known items, one goroutine per item.
type Relay struct {
	st       Outbox
	pub      Publisher
	items    ItemLister
	cfg      config.Relay
	consumer string // unique per live instance
	m        Metrics
	log      *slog.Logger
	// a read's wait for new entries; the cap of the wait between failed sends
	block, maxBackoff time.Duration

	mu      sync.Mutex
	watched map[int64]bool
	ends    map[int64]time.Time // sale end per item, from the last discovery
	wake    chan int64
}

// New returns a relay; every argument and setting but Linger is required.
func New(st Outbox, pub Publisher, items ItemLister, cfg config.Relay, consumer string, m Metrics, log *slog.Logger) (*Relay, error) {
	if consumer == "" || m == nil || log == nil || cfg.Batch <= 0 || cfg.ClaimAfter <= 0 || cfg.Discover <= 0 ||
		cfg.FlushTimeout <= 0 || cfg.Parallel <= 0 || cfg.SendBatch <= 0 || cfg.RetireAfter <= 0 {
		return nil, fmt.Errorf("relay %q: metrics, logger and settings %+v but Linger must be set (SECKILL_API_RELAY_*)", consumer, cfg)
	}
	return &Relay{st: st, pub: pub, items: items, cfg: cfg, consumer: consumer, m: m, log: log.With("component", "relay"),
		block: time.Second, maxBackoff: 5 * time.Second,
		watched: make(map[int64]bool), ends: make(map[int64]time.Time), wake: make(chan int64, 64)}, nil
}

// Watch makes the relay watch an item's outbox now rather than at the next discovery.
func (r *Relay) Watch(itemID int64) {
	if r.isWatched(itemID) {
		return
	}
	select {
	case r.wake <- itemID:
	default: // discovery will find it
	}
}

// Run relays until ctx ends, then flushes what it can within FlushTimeout.
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	start := func(id int64) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.watched[id] {
			return
		}
		r.watched[id] = true
		wg.Go(func() { r.runItem(ctx, id) })
	}
	discover := func() {
		items, err := r.items.ListItems(ctx)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("list items", "err", err)
			}
			return
		}
		r.mu.Lock()
		clear(r.ends)
		for _, it := range items {
			r.ends[it.ID] = it.EndAt
		}
		r.mu.Unlock()
		for _, it := range items {
			if r.closed(it.ID) && (r.isWatched(it.ID) || !r.hasBacklog(ctx, it.ID)) {
				continue // a closed item gets a reader only for a backlog left behind
			}
			start(it.ID)
		}
	}
	discover()
	t := time.NewTicker(r.cfg.Discover)
	defer t.Stop()
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			discover()
		case id := <-r.wake:
			start(id)
		}
	}
	wg.Wait()
}

// closed reports whether the item's sale ended more than RetireAfter ago.
func (r *Relay) closed(itemID int64) bool {
	r.mu.Lock()
	end, ok := r.ends[itemID]
	r.mu.Unlock()
	return ok && time.Since(end) > r.cfg.RetireAfter
}

func (r *Relay) isWatched(itemID int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.watched[itemID]
}

func (r *Relay) runItem(ctx context.Context, itemID int64) {
	log := r.log.With("item_id", itemID)
	backoff := &backoff{max: r.maxBackoff}
	ensureGroup := func() {
		for ctx.Err() == nil {
			if err := r.st.EnsureGroup(ctx, itemID, group); err != nil {
				if ctx.Err() == nil {
					log.Warn("outbox group", "err", err)
				}
				backoff.wait(ctx)
				continue
			}
			return
		}
	}
	ensureGroup()
	// What a previous life of this consumer name received and did not ack.
	pendingFirst := true
	lastClaim := time.Time{}
	for ctx.Err() == nil {
		var entries []outbox.Entry
		var err error
		switch {
		case pendingFirst:
			entries, err = r.st.Read(ctx, itemID, group, r.consumer, int64(r.cfg.Batch), 0, true)
			if err == nil && len(entries) == 0 {
				pendingFirst = false
			}
		case time.Since(lastClaim) >= r.cfg.ClaimAfter/2:
			entries, err = r.st.Claim(ctx, itemID, group, r.consumer, r.cfg.ClaimAfter, int64(r.cfg.Batch))
			if err == nil && len(entries) < r.cfg.Batch {
				lastClaim = time.Now()
			}
			if len(entries) > 0 {
				log.Info("claimed outbox entries left by another instance", "entries", len(entries))
			}
		default:
			entries, err = r.st.Read(ctx, itemID, group, r.consumer, int64(r.cfg.Batch), r.block, false)
		}
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if outbox.IsNoGroup(err) { // the stream was re-created without it (Redis lost it)
				log.Warn("outbox group missing; creating it again", "err", err)
				ensureGroup()
				pendingFirst = true
				continue
			}
			log.Warn("read outbox", "err", err)
			backoff.wait(ctx)
			continue
		}
		backoff.d = 0
		if len(entries) > 0 {
			r.deliver(ctx, itemID, entries)
		} else if !pendingFirst && r.closed(itemID) {
			if n, err := r.st.Len(ctx, itemID); err == nil && n == 0 {
				log.Info("sale closed and outbox empty: reader retired")
				r.m.Backlog(itemID, 0)
				r.mu.Lock()
				delete(r.watched, itemID)
				r.mu.Unlock()
				return
			}
		}
		r.reportBacklog(ctx, itemID)
		if r.cfg.Linger > 0 && len(entries) > 0 && len(entries) < r.cfg.Batch {
			sleep(ctx, r.cfg.Linger)
		}
	}
	r.flush(itemID)
}

func (r *Relay) hasBacklog(ctx context.Context, itemID int64) bool {
	n, err := r.st.Len(ctx, itemID)
	return err == nil && n > 0
}

func (r *Relay) reportBacklog(ctx context.Context, itemID int64) {
	if n, err := r.st.Len(ctx, itemID); err == nil {
		r.m.Backlog(itemID, n)
	}
}

// deliver publishes entries until each is sent and acknowledged, or ctx ends.
func (r *Relay) deliver(ctx context.Context, itemID int64, entries []outbox.Entry) {
	backoff := &backoff{max: r.maxBackoff}
	lastTouch := time.Now()
	for len(entries) > 0 {
		entries = r.sendAll(ctx, itemID, entries)
		if len(entries) == 0 || ctx.Err() != nil {
			return
		}
		r.reportBacklog(ctx, itemID)
		backoff.wait(ctx)
		if time.Since(lastTouch) >= r.cfg.ClaimAfter/3 { // keep entries still retried from looking abandoned
			if err := r.st.Touch(ctx, itemID, group, r.consumer, entryIDs(entries)...); err != nil {
				r.log.Warn("touch outbox entries", "item_id", itemID, "err", err)
			}
			lastTouch = time.Now()
		}
	}
}

// sendAll sends entries in chunks, each acknowledged right after it
// succeeded, and returns the entries of the chunks that failed.
func (r *Relay) sendAll(ctx context.Context, itemID int64, entries []outbox.Entry) []outbox.Entry {
	var valid []outbox.Entry
	for _, e := range entries {
		if e.OrderID == "" || len(e.Body) == 0 { // kept, it would be retried forever
			r.log.Error("dropping malformed outbox entry", "item_id", itemID, "entry", e.ID, "order_id", e.OrderID)
			r.ack(ctx, itemID, e.ID)
			continue
		}
		valid = append(valid, e)
	}
	var (
		mu     sync.Mutex
		failed []outbox.Entry
		wg     sync.WaitGroup
		sem    = make(chan struct{}, r.cfg.Parallel)
		sent   int
	)
	for c := range slices.Chunk(valid, r.cfg.SendBatch) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			msgs := make([]queue.Encoded, len(c))
			for i, e := range c {
				msgs[i] = queue.Encoded{OrderID: e.OrderID, Body: e.Body}
			}
			err := r.pub.PublishOrders(ctx, msgs)
			if err == nil {
				r.ackPublished(ctx, itemID, entryIDs(c), c[0].OrderID)
			}
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				sent += len(c)
				return
			}
			failed = append(failed, c...)
			r.m.PublishFailed()
			if ctx.Err() == nil {
				r.log.Warn("publish orders", "item_id", itemID, "orders", len(c), "first_order_id", c[0].OrderID, "err", err)
			}
		})
	}
	wg.Wait()
	if sent > 0 {
		r.m.Published(sent)
	}
	return failed
}

// ackPublished acknowledges entries the broker stored, retrying: a failed ack means duplicates.
func (r *Relay) ackPublished(ctx context.Context, itemID int64, ids []string, firstOrderID string) {
	for i := 0; ; i++ {
		if r.ack(ctx, itemID, ids...) {
			return
		}
		if i >= 20 {
			r.log.Error("published but could not ack; duplicate messages may follow", "item_id", itemID, "entries", len(ids), "first_order_id", firstOrderID)
			return
		}
		time.Sleep(time.Duration(i+1) * 50 * time.Millisecond)
	}
}

func (r *Relay) ack(ctx context.Context, itemID int64, ids ...string) bool {
	// Not cancelled with the relay: a message that went out must be acked.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := r.st.Ack(ctx, itemID, group, ids...); err != nil {
		r.log.Warn("ack outbox entries", "item_id", itemID, "entries", len(ids), "first", ids[0], "err", err)
		return false
	}
	return true
}

// flush publishes, within FlushTimeout, what this consumer holds and what is unread.
func (r *Relay) flush(itemID int64) {
	ctx, cancel := context.WithTimeout(context.Background(), r.cfg.FlushTimeout)
	defer cancel()
	total := 0
	for _, pending := range []bool{true, false} {
		for ctx.Err() == nil {
			entries, err := r.st.Read(ctx, itemID, group, r.consumer, int64(r.cfg.Batch), 0, pending)
			if err != nil || len(entries) == 0 {
				break
			}
			failed := r.sendAll(ctx, itemID, entries)
			total += len(entries) - len(failed)
			if len(failed) > 0 {
				r.log.Warn("flush stopped; entries stay in the outbox for the next relay", "item_id", itemID, "unsent", len(failed))
				return
			}
		}
	}
	if total > 0 {
		r.log.Info("flushed outbox", "item_id", itemID, "published", total)
	}
}

func entryIDs(es []outbox.Entry) []string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return ids
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// backoff doubles its wait from 100 ms up to max; zero is a reset.
type backoff struct {
	d, max time.Duration
}

func (b *backoff) wait(ctx context.Context) {
	b.d = min(max(2*b.d, 100*time.Millisecond), b.max)
	sleep(ctx, b.d)
}
