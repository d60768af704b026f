// Package api is the buyer-facing HTTP front door (gin): items and their sale
// controls, the purchase endpoint that takes the stampede, orders (status,
// event stream, pay and cancel), health and metrics; it composes the control
// room (package controlroom: the pages and the admin summary), lending it the
// admin check and the error answer.
package api

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/time/rate"

	"github.com/seckill/seckill/api/controlroom"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// ItemStore is the MySQL side of items (store.Store).
type ItemStore interface {
	CreateItem(ctx context.Context, it store.Item) (store.Item, error)
	GetItem(ctx context.Context, id int64) (store.Item, error)
	ListItems(ctx context.Context) ([]store.Item, error)
	EndSale(ctx context.Context, id int64, key string) (store.Item, error)
	AddStock(ctx context.Context, id, n int64, key, addID string, inRedis func(ctx context.Context, it store.Item) error) (store.Item, bool, error)
	AddApplied(ctx context.Context, addID string) (bool, error)
}

// OrderReader reads persisted orders (store.Store).
type OrderReader interface {
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	ListUserOrders(ctx context.Context, userID int64, before string, limit int) ([]store.Order, error)
	CountOrders(ctx context.Context, itemIDs []int64) (map[int64]map[order.Status]int64, error)
	HeldOrders(ctx context.Context, itemID int64) ([]store.Order, error)
}

// OrderActions are the buyer's pay and cancel, judged at the door against
// the time the request was received (payment.Desk).
type OrderActions interface {
	Pay(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error)
	Cancel(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error)
}

// Units is the live stock in Redis (stock.Store).
type Units interface {
	Load(ctx context.Context, itemID, units int64) (bool, error)
	Recount(ctx context.Context, itemID, stockRow int64, deducted []string, mode stock.CountMode) (old, want int64, err error)
	RestoreAll(ctx context.Context, itemID int64, ms []order.Message) (restored int, err error)
	LeftMany(ctx context.Context, itemIDs []int64) (map[int64]int64, error)
	Reserve(ctx context.Context, r order.Message) (int64, error)
	BuyerOrder(ctx context.Context, itemID, userID int64) (string, bool, error)
	BuyerOrders(ctx context.Context, itemIDs []int64, userID int64) (map[int64]string, error)
	MarkedBuyers(ctx context.Context, itemID, max int64) (map[int64]struct{}, bool, error)
	Pulses(ctx context.Context, itemIDs []int64) (map[int64]stock.Pulse, error)
	AddUnits(ctx context.Context, itemID int64, addID string, n int64) (loaded bool, err error)
	UndoAdd(ctx context.Context, itemID int64, addID string) (bool, error)
	AnnounceItem(ctx context.Context, itemID int64, unitsBack bool) (rev int64, err error)
	WatchUnitsBack(ctx context.Context, fn func(itemID int64))
	WatchItems(ctx context.Context, fn func(itemID int64))
}

// StockFence holds an item's stock row still while fn runs (store.Store).
type StockFence interface {
	FenceStock(ctx context.Context, itemID int64, seen store.Stock, deducted []string,
		fn func(row store.Stock, deducted []string) error) (moved bool, err error)
}

// Views are the orders' latest views in Redis (orderstatus.Board).
type Views interface {
	MarkQueued(ctx context.Context, v order.View) error
	Status(ctx context.Context, orderID string) (order.View, bool, error)
	Watch(ctx context.Context, fn func(order.View))
}

// Tokens verifies bearer tokens (auth.Verifier).
type Tokens interface {
	Verify(token string) (auth.Principal, error)
}

// Watcher learns about items as soon as the API does (relay.Relay).
type Watcher interface {
	Watch(itemID int64)
}

// Check is one readiness probe; it must respect ctx's deadline.
type Check func(ctx context.Context) error

// Deps are what the server is built from. Optional: Actions (pay and cancel
// then answer 503), DevSecret (only in development: POST /api/v1/dev/token
// signs with it), Relay, Checks and Temporal (the control room links to its
// Web UI's list of the sagas).
type Deps struct {
	Items     ItemStore
	Orders    OrderReader
	Units     Units
	Views     Views
	Actions   OrderActions
	Stock     StockFence
	Tokens    Tokens
	Metrics   *Metrics
	Relay     Watcher
	Checks    map[string]Check
	Log       *slog.Logger
	DevSecret []byte
	Temporal  config.Temporal
}

// check panics naming a missing dependency or setting: a server without it
// would fail on the first request that needs it instead.
func check(cfg config.API, d Deps) {
	for name, missing := range map[string]bool{
		"Deps.Items": d.Items == nil, "Deps.Orders": d.Orders == nil, "Deps.Units": d.Units == nil,
		"Deps.Views": d.Views == nil, "Deps.Tokens": d.Tokens == nil, "Deps.Metrics": d.Metrics == nil,
		"Deps.Log": d.Log == nil, "Deps.Stock": d.Stock == nil, "config.API.ConfirmTimeout": cfg.ConfirmTimeout <= 0,
		"config.API.ItemRefresh": cfg.ItemRefresh <= 0, "config.API.WriteTimeout": cfg.WriteTimeout <= 0,
		"config.API.EventsPoll": cfg.EventsPoll <= 0, "config.API.EventsMax": cfg.EventsMax <= 0,
		"config.API.StreamsPerBuyer": cfg.StreamsPerBuyer <= 0, "config.API.StreamsMax": cfg.StreamsMax <= 0,
		"config.API.IPLimiterMaxKeys": cfg.IPLimiterMaxKeys <= 0,
	} {
		if missing {
			panic("api.New: " + name + " is required")
		}
	}
}

// Server holds the handlers' dependencies and the per-instance state.
type Server struct {
	cfg     config.API
	deps    Deps
	log     *slog.Logger
	metrics *Metrics
	units   Units
	views   Views
	items   *itemCache
	hub     *hub
	global  *rate.Limiter
	buyers  *keyedLimiters[int64]
	admins  *keyedLimiters[int64]
	ips     *keyedLimiters[string]
	engine  *gin.Engine
	now     func() time.Time
	ready   reused[[]string]
	streams streamCounts
	unsure  *unsureBuyers
	room    *controlroom.Room
}

// New builds the server and its routes (main sets gin's mode before).
func New(cfg config.API, deps Deps) *Server {
	check(cfg, deps)
	s := &Server{
		cfg: cfg, deps: deps, log: deps.Log.With("component", "api"),
		metrics: deps.Metrics, units: deps.Units, views: deps.Views,
		hub:    newHub(),
		global: rate.NewLimiter(rate.Limit(cfg.GlobalRPS), cfg.GlobalBurst),
		buyers: newKeyedLimiters[int64](cfg.BuyerRPS, cfg.BuyerBurst, cfg.LimiterIdleTTL, cfg.LimiterMaxKeys),
		admins: newKeyedLimiters[int64](cfg.AdminRPS, cfg.AdminBurst, cfg.LimiterIdleTTL, 1<<12),
		ips:    newKeyedLimiters[string](cfg.IPRPS, cfg.IPBurst, cfg.LimiterIdleTTL, cfg.IPLimiterMaxKeys),
		now:    time.Now,
		unsure: newUnsureBuyers(10*time.Minute, 100_000),
	}
	s.items = newItemCache(deps.Items, deps.Units, cfg.ItemRefresh, deps.Relay)
	deps.Metrics.reg.MustRegister(s.items)
	s.engine = s.routes()
	return s
}

func (s *Server) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	// The client address is the peer's, unless the peer is one of the
	// configured load balancers: then it comes from X-Forwarded-For, and
	// from no other header.
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if err := e.SetTrustedProxies(s.cfg.TrustedProxies); err != nil {
		// config.Load refuses such a value: a caller that built config.API
		// itself must not get a server that silently trusts nobody.
		panic("api.New: trusted proxies: " + err.Error())
	}
	e.Use(s.recovery(), s.metrics.middleware(), s.bodyLimit())
	e.NoRoute(func(c *gin.Context) { s.fail(c, ErrNoRoute) })
	e.NoMethod(func(c *gin.Context) { s.fail(c, ErrMethodNotAllowed) })

	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	if s.cfg.MetricsAddr == "" {
		e.GET("/metrics", s.publicMetrics())
	}
	s.room = controlroom.Register(e, controlroom.Deps{
		Items: roomItems{s.items}, Pulses: s.units, Orders: s.deps.Orders, FirstPay: s.metrics.firstPay,
		Temporal: s.deps.Temporal, Now: s.now, Fail: s.fail,
		Admin:    func(c *gin.Context) { s.requireRole(c, auth.RoleAdmin) }, // a refusal aborts the chain
		NotFound: func(c *gin.Context) { s.fail(c, ErrNoRoute) },
	})
	v1 := e.Group("/api/v1")
	v1.GET("/time", s.handle(s.serverTime))
	if s.deps.DevSecret != nil {
		v1.POST("/dev/token", s.handle(s.devToken))
	}
	v1.POST("/items", s.handle(s.createItem))
	v1.GET("/items", s.handle(s.listItems))
	v1.GET("/items/:id", s.handle(s.getItem))
	v1.POST("/items/:id/warmup", s.handle(s.warmup))
	v1.POST("/items/:id/end", s.handle(s.endSale))
	v1.POST("/items/:id/stock", s.handle(s.addStock))
	v1.POST("/seckill/:itemId", s.purchase)
	v1.GET("/orders", s.handle(s.listOrders))
	v1.GET("/orders/:orderId", s.handle(s.getOrder))
	v1.GET("/orders/:orderId/events", s.handle(s.events))
	v1.POST("/orders/:orderId/pay", s.handle(s.pay))
	v1.POST("/orders/:orderId/cancel", s.handle(s.cancel))
	return e
}

// metricsRenderTTL is how long one rendering of the registry serves the
// public listener's scrapes.
const metricsRenderTTL = time.Second

// publicMetrics serves /metrics on the public listener. The route needs no
// token and rendering the registry costs far more than any other answer, so
// the registry is rendered at most once a second per instance and every
// scrape gets that text, unlimited: a client flooding the route costs a copy
// of the bytes and cannot make anyone's scrape fail (a limiter, shared or per
// IP, would let it: every local client shares the scraper's loopback
// address). SECKILL_API_METRICS_ADDR takes the route off the public listener.
func (s *Server) publicMetrics() gin.HandlerFunc {
	var rendered reused[[]byte]
	return func(c *gin.Context) {
		text, err := rendered.get(s.now, metricsRenderTTL, s.renderMetrics)
		if err != nil {
			s.fail(c, err)
			return
		}
		c.Data(http.StatusOK, string(expfmt.NewFormat(expfmt.TypeTextPlain)), text)
	}
}

// renderMetrics is the registry in Prometheus' text format.
func (s *Server) renderMetrics() ([]byte, error) {
	families, err := s.metrics.reg.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range families {
		if err := enc.Encode(f); err != nil {
			return nil, fmt.Errorf("render metrics: %w", err)
		}
	}
	return b.Bytes(), nil
}

// HTTPServer serves every route on the configured address (the event
// stream lifts its own deadlines).
func (s *Server) HTTPServer() *http.Server { return s.httpServer(s.cfg.Addr, s.engine) }

// MetricsServer serves /metrics, unlimited, on config.API.MetricsAddr; nil
// when /metrics is public.
func (s *Server) MetricsServer() *http.Server {
	if s.cfg.MetricsAddr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.metrics.Handler())
	return s.httpServer(s.cfg.MetricsAddr, mux)
}

func (s *Server) httpServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr: addr, Handler: h, MaxHeaderBytes: 16 << 10,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout, ReadTimeout: s.cfg.ReadTimeout,
		WriteTimeout: s.cfg.WriteTimeout, IdleTimeout: s.cfg.IdleTimeout,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
}

// bodyLimit refuses bodies above the configured size with 413.
func (s *Server) bodyLimit() gin.HandlerFunc {
	limit := s.cfg.BodyLimitBytes
	return func(c *gin.Context) {
		if limit <= 0 || c.Request.Body == nil || c.Request.Body == http.NoBody {
			return
		}
		if c.Request.ContentLength > limit {
			s.fail(c, ErrPayloadTooLarge)
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	}
}

// handle adapts a handler that returns its error answer.
func (s *Server) handle(h func(c *gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := h(c); err != nil {
			s.fail(c, err)
		}
	}
}

// authenticate returns the request's verified principal, charged to its own
// limiter and of the role asked for, if any. A request without a valid token
// is charged to its client IP's limiter, so token guessing is rate limited
// too.
func (s *Server) authenticate(c *gin.Context, role auth.Role) (auth.Principal, error) {
	h := c.GetHeader("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		if p, err := s.deps.Tokens.Verify(strings.TrimSpace(h[7:])); err == nil {
			// Admins have limiters of their own (setting up sales is not
			// shopping), keyed by the negated id: admin 1 is not buyer 1.
			lim, key := s.buyers, p.UserID
			if p.Role != auth.RoleBuyer {
				lim, key = s.admins, -p.UserID
			}
			if ok, retry := lim.allow(key, s.now()); !ok {
				return p, rateLimited(retry)
			}
			if role != "" && p.Role != role {
				return p, ErrForbidden
			}
			return p, nil
		}
	}
	if err := s.allowIP(c); err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{}, ErrUnauthorized
}

// requireRole is authenticate that answers the error itself.
func (s *Server) requireRole(c *gin.Context, role auth.Role) (auth.Principal, bool) {
	p, err := s.authenticate(c, role)
	if err != nil {
		s.fail(c, err)
	}
	return p, err == nil
}

// allowIP applies the per-IP limiter of unauthenticated traffic.
func (s *Server) allowIP(c *gin.Context) error {
	if ok, retry := s.ips.allow(ipKey(c.ClientIP()), s.now()); !ok {
		return rateLimited(retry)
	}
	return nil
}

// ipKey is the per-IP limiter's key of a client address: an IPv4 address as
// it is, an IPv6 address by its /64 (one subscriber's network: a client
// rotating addresses inside it gets no fresh bucket).
func ipKey(addr string) string {
	ip, err := netip.ParseAddr(addr)
	if err != nil || ip.Is4() || ip.Is4In6() {
		return addr
	}
	p, err := ip.Prefix(64)
	if err != nil {
		return addr
	}
	return p.String()
}

// roomItems is the item cache as the control room reads it.
type roomItems struct{ c *itemCache }

func (r roomItems) Shown(now time.Time) []store.Item {
	cis := r.c.all(endedShown, now)
	out := make([]store.Item, len(cis))
	for i, ci := range cis {
		out[i] = ci.it
	}
	return out
}

func (r roomItems) Known(itemID int64) bool {
	ci, _ := r.c.peek(itemID)
	return ci != nil
}

func (r roomItems) View(it store.Item, left int64, now time.Time) any { return itemView(it, left, now) }

// Run keeps the per-instance state fresh until ctx ends (one subscription
// per instance to each event channel, fanned out in memory); what pub/sub
// loses in a reconnect, the refreshes and the streams' polls catch up.
func (s *Server) Run(ctx context.Context) {
	if err := s.items.loadAll(ctx); err != nil && ctx.Err() == nil {
		s.log.Warn("load items", "err", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { s.units.WatchUnitsBack(ctx, s.items.unitBack) })
	wg.Go(func() {
		s.units.WatchItems(ctx, func(id int64) {
			go func() {
				if err := s.items.reload(ctx, id); err != nil && ctx.Err() == nil {
					s.log.Warn("reload item", "item_id", id, "err", err)
				}
			}()
		})
	})
	wg.Go(func() {
		s.views.Watch(ctx, func(v order.View) {
			s.hub.publish(v)
			s.room.ObserveFirstPay(v)
		})
	})
	wg.Go(func() { s.tick(ctx) })
	wg.Wait()
}

// itemSyncPeriods is how many ItemRefresh periods pass between two reads of
// every item from MySQL: a change lost with its announcement still arrives.
const itemSyncPeriods = 15

func (s *Server) tick(ctx context.Context) {
	t := time.NewTicker(s.cfg.ItemRefresh)
	defer t.Stop()
	sweepEvery := max(s.cfg.LimiterIdleTTL/2, time.Second)
	syncEvery := max(itemSyncPeriods*s.cfg.ItemRefresh, time.Second)
	lastSweep, lastSync := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			rctx, cancel := context.WithTimeout(ctx, s.cfg.ItemRefresh)
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
			if now.Sub(lastSweep) >= sweepEvery {
				s.buyers.sweep(now)
				s.admins.sweep(now)
				s.ips.sweep(now)
				s.room.ForgetFirstPays(now)
				lastSweep = now
			}
		}
	}
}

// parseID parses a positive decimal int64 id (digits only).
func parseID(s string) (int64, bool) {
	if s == "" || len(s) > 19 || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil && n > 0
}

// readyTTL is how long a readiness result is reused: /readyz is public, and
// each evaluation dials every dependency.
const readyTTL = time.Second

// GET /readyz: every dependency answered within a second. A 503 names those
// that did not, and nothing more: the reasons go to the log.
func (s *Server) readyz(c *gin.Context) {
	down, _ := s.ready.get(time.Now, readyTTL, func() ([]string, error) { return s.readyDown(c.Request.Context()), nil })
	checks := make(map[string]string, len(s.deps.Checks))
	for name := range s.deps.Checks {
		checks[name] = "ok"
	}
	for _, name := range down {
		checks[name] = "down"
	}
	if len(down) > 0 {
		c.JSON(http.StatusServiceUnavailable, gin.H{
			"error":  errorObject{Code: ErrUnavailable.Code, Message: "not ready: " + strings.Join(down, ", ") + " down"},
			"checks": checks,
		})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": checks})
}

// readyDown runs the checks at once and names the failing ones, sorted.
func (s *Server) readyDown(ctx context.Context) []string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		down []string
	)
	for name, check := range s.deps.Checks {
		wg.Go(func() {
			if err := check(ctx); err != nil {
				s.log.Warn("readiness check failed", "check", name, "err", err)
				mu.Lock()
				down = append(down, name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	sort.Strings(down)
	return down
}

// TCPCheck is a readiness probe that dials every address.
func TCPCheck(addrs ...string) Check {
	return func(ctx context.Context) error {
		var d net.Dialer
		for _, a := range addrs {
			conn, err := d.DialContext(ctx, "tcp", a)
			if err != nil {
				return fmt.Errorf("dial %s: %w", a, err)
			}
			_ = conn.Close()
		}
		return nil
	}
}

// reused holds the last result of an evaluation, errors included, until it
// is ttl old; callers wait on one evaluation instead of each starting one.
type reused[T any] struct {
	mu  sync.Mutex
	at  time.Time
	val T
	err error
}

func (r *reused[T]) get(now func() time.Time, ttl time.Duration, eval func() (T, error)) (T, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || now().Sub(r.at) >= ttl {
		r.val, r.err = eval()
		r.at = now()
	}
	return r.val, r.err
}
