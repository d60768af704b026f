// Package sale is sale administration (items, warm-up, the admin's end and
// add) and the item read model every instance keeps in memory (Cache).
package sale

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// Catalog is the items in MySQL (store.Store).
type Catalog interface {
	CreateItem(ctx context.Context, it store.Item) (store.Item, error)
	GetItem(ctx context.Context, id int64) (store.Item, error)
	ListItems(ctx context.Context) ([]store.Item, error)
}

// Controls are an admin's writes of a sale in MySQL (store.Store).
type Controls interface {
	EndSale(ctx context.Context, id int64, key string) (store.Item, error)
	AddStock(ctx context.Context, id, n int64, key, addID string, inRedis func(ctx context.Context, it store.Item) error) (store.Item, bool, error)
	AddApplied(ctx context.Context, addID string) (bool, error)
}

// Rows are read with the item's stock row held still (store.Store).
type Rows interface {
	FenceStock(ctx context.Context, itemID int64, seen store.Stock, deducted []string,
		fn func(row store.Stock, deducted []string) error) (moved bool, err error)
	HeldOrders(ctx context.Context, itemID int64) ([]store.Order, error)
}

// Loader loads an item's stock key in Redis and adds an admin's units, once
// per add id (stock.Store).
type Loader interface {
	Load(ctx context.Context, itemID, units int64) (bool, error)
	Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (old, want int64, err error)
	RestoreAll(ctx context.Context, itemID int64, ms []order.Message) (restored int, err error)
	AddUnits(ctx context.Context, itemID int64, addID string, n int64) (loaded bool, err error)
	UndoAdd(ctx context.Context, itemID int64, addID string) (bool, error)
}

// Live are the items' live figures in Redis (stock.Store).
type Live interface {
	LeftMany(ctx context.Context, itemIDs []int64) (map[int64]int64, error)
	Pulses(ctx context.Context, itemIDs []int64) (map[int64]stock.Pulse, error)
	MarkedBuyers(ctx context.Context, itemID, max int64) (map[int64]struct{}, bool, error)
}

// Announcer tells every instance of item changes and units given back
// (stock.Store).
type Announcer interface {
	AnnounceItem(ctx context.Context, itemID int64, unitsBack bool) (rev int64, err error)
	WatchUnitsBack(ctx context.Context, fn func(itemID int64))
	WatchItems(ctx context.Context, fn func(itemID int64))
}

// Watcher learns about items as soon as the API does (relay.Relay).
type Watcher interface {
	Watch(itemID int64)
}

// Deps are what the sale is built from. Relay is optional.
type Deps struct {
	Catalog   Catalog
	Controls  Controls
	Rows      Rows
	Loader    Loader
	Live      Live
	Announcer Announcer
	Relay     Watcher
	// Refresh is how often Run reads the live figures, and how long an
	// unknown id is remembered as missing.
	Refresh  time.Duration
	Registry prometheus.Registerer
	Log      *slog.Logger
	Now      func() time.Time
	// The API's checks (see api's Server.authenticate) and error answer.
	Auth    func(c *gin.Context, role auth.Role) (auth.Principal, error)
	AllowIP func(c *gin.Context) error
	Fail    func(c *gin.Context, err error)
	// Currency is a new item's when its request names none (empty: the
	// column's default).
	Currency string
}

// Sale serves the item routes and keeps the item read model.
type Sale struct {
	d     Deps
	log   *slog.Logger
	items *Cache
}

// Register adds the item routes to r.
func Register(r gin.IRoutes, d Deps) *Sale {
	s := &Sale{d: d, log: d.Log, items: newCache(d.Catalog, d.Live, d.Refresh, d.Relay)}
	d.Registry.MustRegister(s.items)
	h := func(fn func(c *gin.Context) error) gin.HandlerFunc { return apierr.Handle(d.Fail, fn) }
	r.POST("/api/v1/items", h(s.createItem))
	r.GET("/api/v1/items", h(s.listItems))
	r.GET("/api/v1/items/:id", h(s.getItem))
	r.POST("/api/v1/items/:id/warmup", h(s.warmup))
	r.POST("/api/v1/items/:id/end", h(s.control(s.endSale)))
	r.POST("/api/v1/items/:id/stock", h(s.control(s.addStock)))
	return s
}

// Items is the item read model.
func (s *Sale) Items() *Cache { return s.items }

// syncPeriods is how many Refresh periods pass between two reads of every
// item from MySQL (catching changes whose announcement was lost).
const syncPeriods = 15

// Run loads every item, then keeps the read model fresh until ctx ends:
// reloads of announced changes, sold-out items' buyer marks, the periodic
// refresh and sync. Every goroutine it starts ends before it returns.
func (s *Sale) Run(ctx context.Context) {
	c := s.items
	if err := c.loadAll(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("load items", "err", err)
	}
	reloads := make(chan int64, 64)
	var wg sync.WaitGroup
	wg.Go(func() { s.d.Announcer.WatchUnitsBack(ctx, c.unitBack) })
	wg.Go(func() {
		s.d.Announcer.WatchItems(ctx, func(id int64) {
			select {
			case reloads <- id:
			case <-ctx.Done():
			}
		})
	})
	wg.Go(func() {
		for { // this goroutine keeps wg above zero while it adds
			select {
			case <-ctx.Done():
				return
			case id := <-reloads:
				wg.Go(func() {
					if err := c.Reload(ctx, id); err != nil && ctx.Err() == nil {
						s.log.Warn("reload item", "item_id", id, "err", err)
					}
				})
			case ci := <-c.marksLoads:
				wg.Go(func() { c.loadMarksNow(ctx, ci) })
			}
		}
	})
	wg.Go(func() { s.tick(ctx) })
	wg.Wait()
}

func (s *Sale) tick(ctx context.Context) {
	t := time.NewTicker(s.d.Refresh)
	defer t.Stop()
	syncEvery := max(syncPeriods*s.d.Refresh, time.Second)
	lastSync := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rctx, cancel := context.WithTimeout(ctx, s.d.Refresh)
			if err := s.items.refresh(rctx); err != nil && ctx.Err() == nil {
				s.log.Debug("refresh stock", "err", err)
			}
			cancel()
			if now.Sub(lastSync) >= syncEvery {
				sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				if err := s.items.loadAll(sctx); err != nil && ctx.Err() == nil {
					s.log.Debug("sync items", "err", err)
				}
				cancel()
				lastSync = now
			}
		}
	}
}
