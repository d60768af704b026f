package sale

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// Entry is an item as the purchase path sees it: immutable sale data and
// a sold-out flag that lets rejections skip Redis. A change of the sale data
// replaces the whole entry; a request holding the old one finishes with it.
type Entry struct {
	it      store.Item
	soldOut atomic.Bool
	left    atomic.Int64 // last known stock_left, -1 when unknown
	leftAt  atomic.Int64 // when left was last read from Redis (Unix ns), 0 never
	// rev is the sale-data revision in Redis this entry is at least as new
	// as (-1: unknown): a read of MySQL takes it before its query.
	rev atomic.Int64
	// written: the entry is this instance's own change (Sale.changed), newer
	// than any read taken at its revision.
	written bool
	// marks, loaded while the item is sold out, let a buyer who holds a
	// unit get 409 with the order, never 410 (see Cache.MayHold).
	marks   atomic.Pointer[markSet]
	loading atomic.Bool // a marks load is under way
}

// markSet is a sold-out item's buyer marks as last loaded: count of them in
// Redis then; tooMany past maxMarks (every sold-out answer then asks Redis).
type markSet struct {
	count   int64
	users   map[int64]struct{}
	tooMany bool
}

// Cache is the item read model: it keeps every item this instance has seen in memory. Concurrent
// misses share one MySQL query; an id MySQL does not know is remembered as
// missing for a while so that random ids cannot hammer the database.
type Cache struct {
	items   Catalog
	st      Live
	missTTL time.Duration
	relay   Watcher // told of each item new to the cache, if set
	// marksLoads are the sold-out items whose buyer marks Run loads.
	marksLoads chan *Entry

	mu     sync.RWMutex
	byID   map[int64]*Entry
	misses map[int64]time.Time
	sf     singleflight.Group

	// The item list's own reads of stock_left (readLefts): one at a time,
	// and at most one per period.
	leftsMu sync.Mutex
	leftsAt time.Time
}

func newCache(items Catalog, st Live, missTTL time.Duration, relay Watcher) *Cache {
	return &Cache{items: items, st: st, missTTL: missTTL, relay: relay, marksLoads: make(chan *Entry, 256),
		byID: make(map[int64]*Entry), misses: make(map[int64]time.Time)}
}

// Item is the entry's sale data.
func (ci *Entry) Item() store.Item { return ci.it }

// Early is the answer the item's cached state gives without any I/O: sale
// not started, sale ended, sold out; nil when the purchase may go on.
func (ci *Entry) Early(now time.Time) error {
	switch {
	case now.Before(ci.it.StartAt):
		return apierr.ErrSaleNotStarted
	case !now.Before(ci.it.EndAt):
		return apierr.ErrSaleEnded
	case ci.soldOut.Load():
		return apierr.ErrSoldOut
	}
	return nil
}

// replace caches it, read from MySQL after the item's revision was rev (-1:
// unknown), unless the entry is newer: a read never replaces an entry of a
// later revision, nor this instance's own write at the same revision, nor,
// with its revision unknown, any entry (the refresh reloads a stale one).
// A read taken before an "end now" must never undo it.
func (c *Cache) replace(it store.Item, rev int64) *Entry {
	c.mu.Lock()
	old, ok := c.byID[it.ID]
	if ok {
		cur := old.rev.Load()
		if rev < 0 || rev < cur || rev == cur && old.written {
			c.mu.Unlock()
			return old
		}
		if sameSale(old.it, it) {
			old.rev.Store(rev)
			c.mu.Unlock()
			return old
		}
	}
	return c.put(it, old, rev, false)
}

// written caches this instance's own change of an item's sale data, whatever
// the entry holds; it keeps the entry's revision until announced moves it.
func (c *Cache) written(it store.Item) *Entry {
	c.mu.Lock()
	old, ok := c.byID[it.ID]
	rev := int64(-1)
	if ok {
		rev = old.rev.Load()
	}
	return c.put(it, old, rev, true)
}

// announced records the revision a write's announcement moved the item to,
// if ci (the write's entry) is still the item's.
func (c *Cache) announced(ci *Entry, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID[ci.it.ID] == ci && rev > ci.rev.Load() {
		ci.rev.Store(rev)
	}
}

// put stores a new entry for it (old: the entry it replaces, or nil),
// keeping the live stock known, and unlocks c.mu.
func (c *Cache) put(it store.Item, old *Entry, rev int64, written bool) *Entry {
	ci := &Entry{it: it, written: written}
	ci.left.Store(-1)
	ci.rev.Store(rev)
	if old != nil {
		ci.left.Store(old.left.Load())
		ci.leftAt.Store(old.leftAt.Load())
		// An add clears the flag; the next refresh sets it again if need be.
		ci.soldOut.Store(old.soldOut.Load() && it.StockTotal <= old.it.StockTotal)
		if ci.soldOut.Load() {
			ci.marks.Store(old.marks.Load())
		}
	}
	c.byID[it.ID] = ci
	delete(c.misses, it.ID)
	c.mu.Unlock()
	if old == nil && c.relay != nil {
		c.relay.Watch(it.ID)
	}
	return ci
}

func sameSale(a, b store.Item) bool {
	return a.ID == b.ID && a.Name == b.Name && a.PriceCents == b.PriceCents && a.StockTotal == b.StockTotal &&
		a.StartAt.Equal(b.StartAt) && a.EndAt.Equal(b.EndAt) && a.PaymentTimeoutSeconds == b.PaymentTimeoutSeconds
}

// all returns the cached items whose sale has not ended d ago (0: all).
func (c *Cache) all(d time.Duration, now time.Time) []*Entry {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*Entry, 0, len(c.byID))
	for _, ci := range c.byID {
		if d == 0 || now.Sub(ci.it.EndAt) < d {
			out = append(out, ci)
		}
	}
	return out
}

func itemIDs(cis []*Entry) []int64 {
	ids := make([]int64, len(cis))
	for i, ci := range cis {
		ids[i] = ci.it.ID
	}
	return ids
}

// IDs are the ids of the cached items whose sale has not ended d ago.
func (c *Cache) IDs(d time.Duration, now time.Time) []int64 { return itemIDs(c.all(d, now)) }

// Shown returns the sales listed at now (the item list, the control room):
// upcoming, open, or ended within endedShown.
func (c *Cache) Shown(now time.Time) []store.Item {
	cis := c.all(endedShown, now)
	out := make([]store.Item, len(cis))
	for i, ci := range cis {
		out[i] = ci.it
	}
	return out
}

// Known says whether the cache holds the item, whatever its dates.
func (c *Cache) Known(itemID int64) bool {
	ci, _ := c.Peek(itemID)
	return ci != nil
}

// View is an item as the API shows it (an ItemView).
func (c *Cache) View(it store.Item, left int64, now time.Time) any { return itemView(it, left, now) }

// Peek answers from memory only: the cached item, or order.ErrItemNotFound
// for an id remembered as missing, or (nil, nil) when only MySQL can tell.
func (c *Cache) Peek(id int64) (*Entry, error) {
	c.mu.RLock()
	ci, ok := c.byID[id]
	missUntil, missed := c.misses[id]
	c.mu.RUnlock()
	switch {
	case ok:
		return ci, nil
	case missed && time.Now().Before(missUntil):
		return nil, fmt.Errorf("item %d: %w", id, order.ErrItemNotFound)
	}
	return nil, nil
}

// Get is Peek, loading a miss from MySQL.
func (c *Cache) Get(ctx context.Context, id int64) (*Entry, error) {
	if ci, err := c.Peek(id); ci != nil || err != nil {
		return ci, err
	}
	return c.load(ctx, "get:", id, -1)
}

// load reads an item from MySQL and caches it at revision rev, read from
// Redis before the query when not given (-1); concurrent loads of one kind
// and revision share the query (a "reload:" never joins a "get:", nor a
// load of an earlier revision, that may have read before the change it was
// told of).
func (c *Cache) load(ctx context.Context, kind string, id, rev int64) (*Entry, error) {
	key := kind + strconv.FormatInt(id, 10)
	if rev >= 0 {
		key += "@" + strconv.FormatInt(rev, 10)
	}
	v, err, _ := c.sf.Do(key, func() (any, error) {
		// Shared by every waiter: not bound to the first caller's request.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		if rev < 0 {
			if known, ok := c.revs(lctx, []int64{id})[id]; ok {
				rev = known
			}
		}
		it, err := c.items.GetItem(lctx, id)
		if errors.Is(err, order.ErrItemNotFound) {
			c.mu.Lock()
			if len(c.misses) >= 10_000 {
				clear(c.misses)
			}
			c.misses[id] = time.Now().Add(c.missTTL)
			c.mu.Unlock()
		}
		if err != nil {
			return nil, err
		}
		return c.replace(it, rev), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*Entry), nil
}

// Reload loads an item whose change was announced, at the revision read
// now (after the announcement's INCR): it never joins a load that began
// before the change.
func (c *Cache) Reload(ctx context.Context, id int64) error {
	rev, ok := c.revs(ctx, []int64{id})[id]
	if !ok {
		rev = -1
	}
	_, err := c.load(ctx, "reload:", id, rev)
	return err
}

// loadAll brings the cache up to date with MySQL, each cached item at the
// revision read before the query.
func (c *Cache) loadAll(ctx context.Context) error {
	revs := c.revs(ctx, itemIDs(c.all(0, time.Now())))
	items, err := c.items.ListItems(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		rev, ok := revs[it.ID]
		if !ok {
			rev = -1
		}
		c.replace(it, rev)
	}
	return nil
}

// revs reads the items' sale-data revisions; an item missing from the
// answer (Redis failed) has none known.
func (c *Cache) revs(ctx context.Context, ids []int64) map[int64]int64 {
	out := make(map[int64]int64, len(ids))
	if len(ids) == 0 {
		return out
	}
	pulses, err := c.st.Pulses(ctx, ids)
	if err != nil {
		return out
	}
	for id, p := range pulses {
		out[id] = p.Rev
	}
	return out
}

// setLeft records a live read of stock_left (marks: the item's mark count,
// -1 when unknown). A sold-out item's marks stay loaded until it has units
// again or its sale ends (whose answer then comes first).
func (c *Cache) setLeft(ci *Entry, left, marks int64) {
	ci.left.Store(left)
	ci.leftAt.Store(time.Now().UnixNano())
	ci.soldOut.Store(left <= 0)
	if left <= 0 && time.Now().Before(ci.it.EndAt) {
		c.loadMarks(ci, marks)
	} else {
		ci.marks.Store(nil)
	}
}

func (c *Cache) MarkSoldOut(ci *Entry) { c.setLeft(ci, 0, -1) }

// readLefts reads again from Redis, in one round trip, the stock_left of
// those of cis last read period ago or more (the periodic refresh reads them
// all, a purchase learns a sold-out); at most one such read per period, one
// at a time, runs on this instance, however many callers ask: the others
// wait for it, or find it was done within the period and keep the figures
// as they are. An item Redis has no stock for keeps its figure (the caller
// shows stock_total while none was ever read).
func (c *Cache) readLefts(ctx context.Context, cis []*Entry, period time.Duration) error {
	stale := func() []*Entry {
		var out []*Entry
		for _, ci := range cis {
			if time.Since(time.Unix(0, ci.leftAt.Load())) >= period {
				out = append(out, ci)
			}
		}
		return out
	}
	if len(stale()) == 0 {
		return nil
	}
	c.leftsMu.Lock()
	defer c.leftsMu.Unlock()
	old := stale()
	if len(old) == 0 || time.Since(c.leftsAt) < period {
		return nil
	}
	// Taken before the read: a Redis that fails or hangs is asked again
	// only a period later, not by every caller in line.
	c.leftsAt = time.Now()
	live, err := c.st.LeftMany(ctx, itemIDs(old))
	if err != nil {
		return err
	}
	for _, ci := range old {
		if n, ok := live[ci.it.ID]; ok {
			c.setLeft(ci, n, -1)
		}
	}
	return nil
}

// unitBack clears an item's sold-out flag (a compensation released a unit).
func (c *Cache) unitBack(id int64) {
	if ci, _ := c.Peek(id); ci != nil {
		ci.soldOut.Store(false)
		ci.marks.Store(nil)
	}
}

// MayHold says whether the buyer may hold a unit of an item this instance
// holds sold out: false only when its buyer marks, loaded into memory once it
// is sold out (and again when their count moves), do not name the buyer;
// while they are not loaded, a load starts and the answer is true.
func (c *Cache) MayHold(ci *Entry, userID int64) bool {
	if ms := ci.marks.Load(); ms != nil {
		_, holds := ms.users[userID]
		return holds || ms.tooMany
	}
	c.loadMarks(ci, -1)
	return true
}

// maxMarks bounds the marks one sold-out item's set holds in memory.
const maxMarks = 1 << 20

// loadMarks has Run load a sold-out item's buyer marks unless a load is under
// way or the set is current (count: the marks in Redis, -1 when unknown).
func (c *Cache) loadMarks(ci *Entry, count int64) {
	if ms := ci.marks.Load(); ms != nil && (count < 0 || ms.count == count || ms.tooMany && count > maxMarks) {
		return
	}
	if !ci.loading.CompareAndSwap(false, true) {
		return
	}
	select {
	case c.marksLoads <- ci:
	default: // Run is behind: a later sold-out answer asks again
		ci.loading.Store(false)
	}
}

// loadMarksNow loads a sold-out item's buyer marks (Run's, for loadMarks).
func (c *Cache) loadMarksNow(ctx context.Context, ci *Entry) {
	defer ci.loading.Store(false)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	users, ok, err := c.st.MarkedBuyers(ctx, ci.it.ID, maxMarks)
	switch {
	case err != nil || !ci.soldOut.Load():
	case !ok:
		ci.marks.Store(&markSet{count: -1, tooMany: true})
	default:
		ci.marks.Store(&markSet{count: int64(len(users)), users: users})
	}
}

// refresh reads the live state of every cached item in one pipeline: a
// sold-out flag clears within one period even if the stock event was lost,
// and an item whose revision moved (an announcement missed) is reloaded.
func (c *Cache) refresh(ctx context.Context) error {
	cis := c.all(0, time.Now())
	states, err := c.st.Pulses(ctx, itemIDs(cis))
	if err != nil {
		return err
	}
	var stale []int64
	for _, ci := range cis {
		st, ok := states[ci.it.ID]
		if ok && st.Rev != ci.rev.Load() {
			stale = append(stale, ci.it.ID)
		}
		if ok && st.Loaded {
			c.setLeft(ci, st.Left, st.Marks)
		}
	}
	for _, id := range stale {
		if _, err := c.load(ctx, "reload:", id, states[id].Rev); err != nil {
			return err
		}
	}
	return nil
}

var stockLeftDesc = prometheus.NewDesc("seckill_stock_left",
	"Units not reserved in Redis, per item, as this API instance last read them (every SECKILL_API_ITEM_REFRESH).",
	[]string{"item_id"}, nil)

func (c *Cache) Describe(ch chan<- *prometheus.Desc) { ch <- stockLeftDesc }

// Collect exports the known stock_left of the items whose sale has started.
func (c *Cache) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, ci := range c.all(0, now) {
		if n := ci.left.Load(); n >= 0 && !now.Before(ci.it.StartAt) {
			ch <- prometheus.MustNewConstMetric(stockLeftDesc, prometheus.GaugeValue, float64(n), strconv.FormatInt(ci.it.ID, 10))
		}
	}
}
