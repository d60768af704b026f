package api

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

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// cachedItem is an item as the purchase path sees it: immutable sale data and
// a sold-out flag that lets rejections skip Redis. When the sale data changes
// (an admin ended the sale or added units) the cache replaces the whole
// entry; a request holding the old one finishes with it.
type cachedItem struct {
	it      store.Item
	soldOut atomic.Bool
	left    atomic.Int64 // last known stock_left, -1 when unknown
	rev     atomic.Int64 // the sale-data revision this entry was loaded at
	// marks is the set of buyers holding a mark, loaded while the item is
	// sold out: a sold-out answer checks it so that a buyer who holds a
	// unit gets 409 with the order, never 410 (see Server.soldOut).
	marks   atomic.Pointer[markSet]
	loading atomic.Bool // a marks load is under way
}

// markSet is a sold-out item's buyer marks as this instance last loaded
// them; count is the number of marks Redis had when it was loaded.
type markSet struct {
	count int64
	users map[int64]struct{}
	// tooMany: more than maxMarks; every sold-out answer asks Redis.
	tooMany bool
}

// itemCache keeps every item this instance has seen in memory. A miss loads
// from MySQL once (concurrent misses share the query); an id MySQL does not
// know is remembered as missing for a short while so that random ids cannot
// hammer the database.
type itemCache struct {
	items   ItemStore
	st      Units
	missTTL time.Duration
	onNew   func(int64)

	mu     sync.RWMutex
	byID   map[int64]*cachedItem
	misses map[int64]time.Time
	sf     singleflight.Group
}

func newItemCache(items ItemStore, st Units, missTTL time.Duration, onNew func(int64)) *itemCache {
	if onNew == nil {
		onNew = func(int64) {}
	}
	return &itemCache{items: items, st: st, missTTL: missTTL, onNew: onNew,
		byID: make(map[int64]*cachedItem), misses: make(map[int64]time.Time)}
}

// replace stores it as the item's sale data when it differs from the cached
// one (an end or an add), keeping what is known of the live stock; rev is
// the revision it was read at (-1: keep the entry's). It returns the entry
// now cached.
func (c *itemCache) replace(it store.Item, rev int64) *cachedItem {
	c.mu.Lock()
	old, ok := c.byID[it.ID]
	if ok && sameSale(old.it, it) {
		if rev >= 0 {
			old.rev.Store(rev)
		}
		c.mu.Unlock()
		return old
	}
	ci := &cachedItem{it: it}
	ci.left.Store(-1)
	ci.rev.Store(max(rev, 0))
	if ok {
		if rev < 0 {
			ci.rev.Store(old.rev.Load())
		}
		ci.left.Store(old.left.Load())
		// More units (an add) clear the flag; the next refresh sets it
		// from Redis again if need be.
		ci.soldOut.Store(old.soldOut.Load() && it.StockTotal <= old.it.StockTotal)
		if ci.soldOut.Load() {
			ci.marks.Store(old.marks.Load())
		}
	}
	c.byID[it.ID] = ci
	delete(c.misses, it.ID)
	c.mu.Unlock()
	if !ok {
		c.onNew(it.ID)
	}
	return ci
}

// sameSale reports whether two reads of an item carry the same sale data.
func sameSale(a, b store.Item) bool {
	return a.ID == b.ID && a.Name == b.Name && a.PriceCents == b.PriceCents && a.StockTotal == b.StockTotal &&
		a.StartAt.Equal(b.StartAt) && a.EndAt.Equal(b.EndAt) && a.PaymentTimeoutSeconds == b.PaymentTimeoutSeconds
}

// reload reads an item's sale data from MySQL again and caches it; rev is
// the revision seen before the read (-1 when unknown).
func (c *itemCache) reload(ctx context.Context, id, rev int64) (*cachedItem, error) {
	return c.load(ctx, "reload:", id, rev)
}

// all returns every cached item.
func (c *itemCache) all() []*cachedItem {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]*cachedItem, 0, len(c.byID))
	for _, ci := range c.byID {
		out = append(out, ci)
	}
	return out
}

// peek answers from memory only: the cached item, or order.ErrItemNotFound for an
// id remembered as missing, or (nil, nil) when only MySQL can tell.
func (c *itemCache) peek(id int64) (*cachedItem, error) {
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

// get returns the cached item or order.ErrItemNotFound, loading a miss from MySQL.
func (c *itemCache) get(ctx context.Context, id int64) (*cachedItem, error) {
	if ci, err := c.peek(id); ci != nil || err != nil {
		return ci, err
	}
	return c.load(ctx, "get:", id, -1)
}

// load reads an item from MySQL and caches it at revision rev; concurrent
// loads of one kind share the query (a reload never joins a get that may
// have read before the change it was told of). An id MySQL does not know is
// remembered as missing for missTTL.
func (c *itemCache) load(ctx context.Context, kind string, id, rev int64) (*cachedItem, error) {
	v, err, _ := c.sf.Do(kind+strconv.FormatInt(id, 10), func() (any, error) {
		// Shared by every waiter: not bound to the first caller's request.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
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
	return v.(*cachedItem), nil
}

// loadAll fills the cache with every item (at start), and later brings it
// up to date with MySQL: items created on other instances, sale data changed
// while this instance missed the announcement.
func (c *itemCache) loadAll(ctx context.Context) error {
	items, err := c.items.ListItems(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		c.replace(it, -1)
	}
	return nil
}

// markSoldOut is called when Reserve says sold out or leaves nothing.
func (c *itemCache) markSoldOut(ci *cachedItem) {
	ci.left.Store(0)
	ci.soldOut.Store(true)
	c.loadMarks(ci, -1)
}

// unitBack clears an item's sold-out flag (a compensation released a unit).
func (c *itemCache) unitBack(id int64) {
	c.mu.RLock()
	ci := c.byID[id]
	c.mu.RUnlock()
	if ci != nil {
		ci.soldOut.Store(false)
		ci.marks.Store(nil)
	}
}

// maxMarks bounds the marks one sold-out item's set holds in memory (8-16
// bytes each); above it every sold-out answer of that item asks Redis for
// the buyer's mark.
const maxMarks = 1 << 20

// loadMarks loads a sold-out item's buyer marks in the background unless a
// load is under way or the set is current (count: the marks Redis holds now,
// -1 when unknown).
func (c *itemCache) loadMarks(ci *cachedItem, count int64) {
	if ms := ci.marks.Load(); ms != nil && (count < 0 || ms.count == count || ms.tooMany && count > maxMarks) {
		return
	}
	if !ci.loading.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer ci.loading.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		users, ok, err := c.st.MarkedBuyers(ctx, ci.it.ID, maxMarks)
		switch {
		case err != nil || !ci.soldOut.Load():
		case !ok:
			ci.marks.Store(&markSet{count: -1, tooMany: true})
		default:
			ci.marks.Store(&markSet{count: int64(len(users)), users: users})
		}
	}()
}

// refresh reads the live state of every cached item in one pipeline: it sets
// the sold-out flags from stock_left, so a flag clears within one period
// even if the stock event was lost; it reloads an item whose sale-data
// revision moved (an end or add whose announcement this instance missed);
// and it keeps the marks of sold-out items current.
func (c *itemCache) refresh(ctx context.Context) error {
	c.mu.RLock()
	ids := make([]int64, 0, len(c.byID))
	for id := range c.byID {
		ids = append(ids, id)
	}
	c.mu.RUnlock()
	states, err := c.st.Pulses(ctx, ids)
	if err != nil {
		return err
	}
	var stale []int64
	now := time.Now()
	c.mu.RLock()
	for id, st := range states {
		ci := c.byID[id]
		if ci == nil {
			continue
		}
		if st.Rev != ci.rev.Load() {
			stale = append(stale, id)
		}
		if !st.Loaded {
			continue
		}
		ci.left.Store(st.Left)
		ci.soldOut.Store(st.Left <= 0)
		if st.Left <= 0 && now.Before(ci.it.EndAt) {
			c.loadMarks(ci, st.Marks)
		} else {
			ci.marks.Store(nil) // units again, or the sale ended: its answer comes first
		}
	}
	c.mu.RUnlock()
	for _, id := range stale {
		if _, err := c.reload(ctx, id, states[id].Rev); err != nil {
			return err
		}
	}
	return nil
}

// stockLeftDesc is the per-item gauge the item cache exports.
var stockLeftDesc = prometheus.NewDesc("seckill_stock_left",
	"Units not reserved in Redis, per item, as this API instance last read them (every SECKILL_API_ITEM_REFRESH).",
	[]string{"item_id"}, nil)

// Describe implements prometheus.Collector.
func (c *itemCache) Describe(ch chan<- *prometheus.Desc) { ch <- stockLeftDesc }

// Collect exports stock_left of the cached items whose sale has started
// and whose figure is known.
func (c *itemCache) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.mu.RLock()
	defer c.mu.RUnlock()
	for id, ci := range c.byID {
		if n := ci.left.Load(); n >= 0 && !now.Before(ci.it.StartAt) {
			ch <- prometheus.MustNewConstMetric(stockLeftDesc, prometheus.GaugeValue, float64(n), strconv.FormatInt(id, 10))
		}
	}
}
