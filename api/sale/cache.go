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

// Entry is an item as the purchase path sees it: immutable sale data (a
// change replaces the entry) and live figures that let rejections skip Redis.
type Entry struct {
	it      store.Item
	soldOut atomic.Bool
	left    atomic.Int64 // last known stock_left, -1 when unknown
	leftAt  atomic.Int64 // when left was last read (Unix ns), 0 never
	// rev is the sale-data revision in Redis this entry is at least as new
	// as (-1: unknown): a read of MySQL takes it before its query.
	rev atomic.Int64
	// written: this instance's own change, newer than any read at its rev.
	written bool
	// marks (see Cache.MayHold), loaded while the item is sold out.
	marks   atomic.Pointer[markSet]
	loading atomic.Bool // a marks load is under way
}

// markSet is a sold-out item's buyer marks as last loaded; tooMany past
// maxMarks (every sold-out answer then asks Redis).
type markSet struct {
	count   int64
	users   map[int64]struct{}
	tooMany bool
}

// Cache is the item read model: every item this instance has seen, in
// memory. Concurrent misses share one MySQL query; an unknown id is
// remembered as missing for missTTL, so random ids cannot hammer MySQL.
type Cache struct {
	items      Catalog
	st         Live
	missTTL    time.Duration
	relay      Watcher     // told of each item new to the cache, if set
	marksLoads chan *Entry // sold-out items whose buyer marks Run loads

	mu     sync.RWMutex
	byID   map[int64]*Entry
	misses map[int64]time.Time
	sf     singleflight.Group

	leftsMu sync.Mutex // readLefts: one at a time, at most one per period
	leftsAt time.Time
}

func newCache(items Catalog, st Live, missTTL time.Duration, relay Watcher) *Cache {
	return &Cache{items: items, st: st, missTTL: missTTL, relay: relay, marksLoads: make(chan *Entry, 256),
		byID: make(map[int64]*Entry), misses: make(map[int64]time.Time)}
}

// Item is the entry's sale data.
func (ci *Entry) Item() store.Item { return ci.it }

// Early is the answer the cached state gives without I/O, or nil.
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

// replace caches it, read from MySQL at revision rev (-1: unknown), unless
// the entry is newer: a later revision, this instance's own write at the
// same revision, or any entry when rev is unknown (the refresh reloads a
// stale one). A read taken before an "end now" must never undo it.
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

// written caches this instance's own change, keeping the entry's revision
// until announced moves it.
func (c *Cache) written(it store.Item) *Entry {
	c.mu.Lock()
	old, ok := c.byID[it.ID]
	rev := int64(-1)
	if ok {
		rev = old.rev.Load()
	}
	return c.put(it, old, rev, true)
}

// announced records the revision a write's announcement moved ci to.
func (c *Cache) announced(ci *Entry, rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID[ci.it.ID] == ci && rev > ci.rev.Load() {
		ci.rev.Store(rev)
	}
}

// put stores a new entry replacing old (or nil), keeping its live figures,
// and unlocks c.mu.
func (c *Cache) put(it store.Item, old *Entry, rev int64, written bool) *Entry {
	ci := &Entry{it: it, written: written}
	ci.left.Store(-1)
	ci.rev.Store(rev)
	if old != nil {
		ci.left.Store(old.left.Load())
		ci.leftAt.Store(old.leftAt.Load())
		// An add clears the flag (the next refresh sets it again if need be).
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

// Shown returns the sales listed at now: not ended over endedShown ago.
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

// Peek answers from memory: the item, order.ErrItemNotFound for an id
// remembered as missing, or (nil, nil) when only MySQL can tell.
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

// load reads an item from MySQL and caches it at revision rev (read from
// Redis first when -1). Concurrent loads of one kind and revision share the
// query: a reload never joins a load that may have read before its change.
func (c *Cache) load(ctx context.Context, kind string, id, rev int64) (*Entry, error) {
	key := kind + strconv.FormatInt(id, 10)
	if rev >= 0 {
		key += "@" + strconv.FormatInt(rev, 10)
	}
	v, err, _ := c.sf.Do(key, func() (any, error) {
		// Shared by every waiter, so not bound to the first one's request.
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

// Reload loads an item whose change was announced, at the revision read now.
func (c *Cache) Reload(ctx context.Context, id int64) error {
	rev, ok := c.revs(ctx, []int64{id})[id]
	if !ok {
		rev = -1
	}
	_, err := c.load(ctx, "reload:", id, rev)
	return err
}

// loadAll brings the cache up to date with MySQL.
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

// revs reads the items' revisions; none are known when Redis fails.
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

// setLeft records a live read of stock_left (marks: the mark count, -1
// unknown). A sold-out item's marks stay loaded until it has units again or
// its sale ends.
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

// readLefts reads again, in one round trip, the stock_left of those of cis
// read period ago or more; at most one such read per period runs on this
// instance, however many callers ask. An item without stock in Redis keeps
// its figure.
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
	// Set before the read: a failing Redis is asked again a period later.
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

// MayHold says whether the buyer may hold a unit of a sold-out item: false
// only when its loaded buyer marks do not name the buyer; while they are not
// loaded, a load starts and the answer is true.
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
// way or the set is current (count: the marks in Redis, -1 unknown).
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

// refresh reads the live state of every cached item in one pipeline and
// reloads those whose revision moved (an announcement missed).
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

// Collect exports the known stock_left of the started sales.
func (c *Cache) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	for _, ci := range c.all(0, now) {
		if n := ci.left.Load(); n >= 0 && !now.Before(ci.it.StartAt) {
			ch <- prometheus.MustNewConstMetric(stockLeftDesc, prometheus.GaugeValue, float64(n), strconv.FormatInt(ci.it.ID, 10))
		}
	}
}
