package api

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/seckill/seckill/store"
)

// cachedItem is an item as the purchase path sees it: immutable sale data and
// a sold-out flag that lets rejections skip Redis.
type cachedItem struct {
	it      store.Item
	soldOut atomic.Bool
	left    atomic.Int64 // last known stock_left, -1 when unknown
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

func (c *itemCache) put(it store.Item) *cachedItem {
	c.mu.Lock()
	ci, ok := c.byID[it.ID]
	if !ok {
		ci = &cachedItem{it: it}
		ci.left.Store(-1)
		c.byID[it.ID] = ci
	}
	delete(c.misses, it.ID)
	c.mu.Unlock()
	if !ok {
		c.onNew(it.ID)
	}
	return ci
}

// peek answers from memory only: the cached item, or ErrItemNotFound for an
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
		return nil, ErrItemNotFound
	}
	return nil, nil
}

// get returns the cached item or ErrItemNotFound, loading a miss from MySQL.
func (c *itemCache) get(ctx context.Context, id int64) (*cachedItem, error) {
	if ci, err := c.peek(id); ci != nil || err != nil {
		return ci, err
	}
	v, err, _ := c.sf.Do(strconv.FormatInt(id, 10), func() (any, error) {
		// Shared by every waiter: not bound to the first caller's request.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer cancel()
		it, err := c.items.GetItem(lctx, id)
		if errors.Is(err, store.ErrItemNotFound) {
			c.mu.Lock()
			if len(c.misses) >= 10_000 {
				clear(c.misses)
			}
			c.misses[id] = time.Now().Add(c.missTTL)
			c.mu.Unlock()
			return nil, ErrItemNotFound
		}
		if err != nil {
			return nil, fmt.Errorf("load item %d: %w", id, err)
		}
		return c.put(it), nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*cachedItem), nil
}

// loadAll fills the cache with every item (at start).
func (c *itemCache) loadAll(ctx context.Context) error {
	items, err := c.items.ListItems(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		c.put(it)
	}
	return nil
}

// markSoldOut is called when Reserve says sold out or leaves nothing.
func (c *itemCache) markSoldOut(ci *cachedItem) {
	ci.left.Store(0)
	ci.soldOut.Store(true)
}

// unitBack clears an item's sold-out flag (a compensation released a unit).
func (c *itemCache) unitBack(id int64) {
	c.mu.RLock()
	ci := c.byID[id]
	c.mu.RUnlock()
	if ci != nil {
		ci.soldOut.Store(false)
	}
}

// refresh reads the live stock of every cached item in one pipeline and sets
// the sold-out flags from it, so a flag clears within one period even if the
// stock event was lost.
func (c *itemCache) refresh(ctx context.Context) error {
	c.mu.RLock()
	ids := make([]int64, 0, len(c.byID))
	for id := range c.byID {
		ids = append(ids, id)
	}
	c.mu.RUnlock()
	left, err := c.st.LeftMany(ctx, ids)
	if err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for id, n := range left {
		if ci := c.byID[id]; ci != nil {
			ci.left.Store(n)
			ci.soldOut.Store(n <= 0)
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
