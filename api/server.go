// Package api is the HTTP front door (gin): router, middleware, auth, rate
// limits, readiness, metrics and Run. It composes the jobs sale, purchase,
// orders and controlroom, lending them the checks and the error answer.
package api

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/common/expfmt"
	"golang.org/x/time/rate"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/controlroom"
	"github.com/seckill/seckill/api/orders"
	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/api/purchase"
	"github.com/seckill/seckill/api/sale"
	"github.com/seckill/seckill/api/support"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// The dependencies' interfaces are composed of the jobs' own.
type (
	// ItemStore is the MySQL side of items (store.Store).
	ItemStore interface {
		sale.Catalog
		sale.Controls
	}
	// OrderReader reads persisted orders (store.Store).
	OrderReader interface {
		orders.Rows
		support.Rows
		controlroom.OrderCounts
		HeldOrders(ctx context.Context, itemID int64) ([]store.Order, error)
	}
	// OrderActions are the buyer's pay and cancel (payment.Desk).
	OrderActions = orders.Actions
	// Units is the live stock in Redis (stock.Store).
	Units interface {
		sale.Loader
		sale.Live
		sale.Announcer
		purchase.Units
		orders.Marks
	}
	// StockFence holds an item's stock row still while fn runs (store.Store).
	StockFence interface {
		FenceStock(ctx context.Context, itemID int64, seen store.Stock, deducted []string,
			fn func(row store.Stock, deducted []string) error) (moved bool, err error)
	}
	// Views are the orders' latest views in Redis (orderstatus.Board).
	Views interface {
		purchase.Views
		orders.Views
		Watch(ctx context.Context, fn func(order.View))
	}
	// Watcher learns about items as soon as the API does (relay.Relay).
	Watcher = sale.Watcher
)

// Tokens verifies bearer tokens (auth.Verifier).
type Tokens interface {
	Verify(token string) (auth.Principal, error)
}

// Check is one readiness probe; it must respect ctx's deadline.
type Check func(ctx context.Context) error

// Deps are what the server is built from. Optional: Actions (pay and cancel
// then answer 503), Refunds (support refunds then answer 503), DevSecret
// (enables POST /api/v1/dev/token), Relay, Checks, Temporal and Books.
type Deps struct {
	// EventKeys are the order events' public keys (GET /api/v1/events/keys).
	EventKeys []ed25519.PublicKey
	Items     ItemStore
	Orders    OrderReader
	Units     Units
	Views     Views
	Actions   OrderActions
	Refunds   support.Refunds
	Stock     StockFence
	Tokens    Tokens
	Metrics   *Metrics
	Relay     Watcher
	Checks    map[string]Check
	Log       *slog.Logger
	DevSecret []byte
	Temporal  config.Temporal
	// Payments: checkout and the provider's notifications (no Cashier:
	// payments at the door only, the routes answer 404).
	Payments payhook.Options
	// Currency is a new item's when its request names none (ISO 4217).
	Currency string
	// Books: what the control room's check of a sale's books against the
	// provider's own ledger reads (no sources: the route answers 503).
	Books controlroom.Books
}

// check panics naming a missing dependency or setting.
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

// Server is the API of one instance.
type Server struct {
	cfg     config.API
	deps    Deps
	log     *slog.Logger
	metrics *Metrics
	global  *rate.Limiter
	buyers  *keyedLimiters[int64]
	admins  *keyedLimiters[int64]
	ips     *keyedLimiters[string]
	engine  *gin.Engine
	now     func() time.Time
	ready   apierr.Reused[[]string]
	sale    *sale.Sale
	orders  *orders.Orders
	room    *controlroom.Room
}

// New builds the server and its routes (main sets gin's mode before).
func New(cfg config.API, deps Deps) *Server {
	check(cfg, deps)
	s := &Server{
		cfg: cfg, deps: deps, log: deps.Log.With("component", "api"),
		metrics: deps.Metrics,
		global:  rate.NewLimiter(rate.Limit(cfg.GlobalRPS), cfg.GlobalBurst),
		buyers:  newKeyedLimiters[int64](cfg.BuyerRPS, cfg.BuyerBurst, cfg.LimiterIdleTTL, cfg.LimiterMaxKeys),
		admins:  newKeyedLimiters[int64](cfg.AdminRPS, cfg.AdminBurst, cfg.LimiterIdleTTL, 1<<12),
		ips:     newKeyedLimiters[string](cfg.IPRPS, cfg.IPBurst, cfg.LimiterIdleTTL, cfg.IPLimiterMaxKeys),
		now:     time.Now,
	}
	s.engine = s.routes()
	return s
}

func (s *Server) routes() *gin.Engine {
	e := gin.New()
	e.HandleMethodNotAllowed = true
	// The client address is the peer's, or X-Forwarded-For's (only) when the
	// peer is a trusted proxy.
	e.RemoteIPHeaders = []string{"X-Forwarded-For"}
	if err := e.SetTrustedProxies(s.cfg.TrustedProxies); err != nil {
		// Never silently trust nobody (config.Load refuses such a value).
		panic("api.New: trusted proxies: " + err.Error())
	}
	e.Use(s.recovery(), s.metrics.middleware(), s.bodyLimit())
	e.NoRoute(func(c *gin.Context) { s.fail(c, apierr.ErrNoRoute) })
	e.NoMethod(func(c *gin.Context) { s.fail(c, apierr.ErrMethodNotAllowed) })

	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", s.readyz)
	if s.cfg.MetricsAddr == "" {
		e.GET("/metrics", s.publicMetrics())
	}
	e.GET("/api/v1/time", apierr.Handle(s.fail, s.serverTime))
	e.GET("/api/v1/events/keys", apierr.Handle(s.fail, s.eventKeys))
	if s.deps.DevSecret != nil {
		e.POST("/api/v1/dev/token", apierr.Handle(s.fail, s.devToken))
	}
	s.compose(e)
	return e
}

// compose registers the jobs' routes and metrics.
func (s *Server) compose(e *gin.Engine) {
	d, reg := s.deps, s.metrics.reg
	s.sale = sale.Register(e, sale.Deps{
		Catalog: d.Items, Controls: d.Items, Rows: saleRows{d.Stock, d.Orders},
		Loader: d.Units, Live: d.Units, Announcer: d.Units, Relay: d.Relay,
		Refresh: s.cfg.ItemRefresh, Registry: reg, Log: s.log, Now: s.now,
		Auth: s.authenticate, AllowIP: s.allowIP, Fail: s.fail, Currency: d.Currency,
	})
	items := s.sale.Items()
	purchase.Register(e, purchase.Deps{
		Items: items, Units: d.Units, Views: d.Views, Registry: reg, Log: s.log, Now: s.now,
		WriteTimeout: s.cfg.WriteTimeout, ConfirmTimeout: s.cfg.ConfirmTimeout,
		Auth: s.authenticate, Global: s.allowGlobal, Fail: s.fail,
	})
	s.orders = orders.Register(e, orders.Deps{
		Rows: d.Orders, Views: d.Views, Marks: d.Units, Items: items, Actions: d.Actions,
		Config: s.cfg, Log: s.log, Now: s.now, Auth: s.authenticate, Fail: s.fail,
	})
	support.Register(e, support.Deps{Rows: d.Orders, Refunds: d.Refunds, Temporal: d.Temporal, Log: s.log,
		Auth: s.authenticate, Fail: s.fail})
	payhook.Register(e, payhook.Deps{Options: d.Payments, Log: s.log, Now: s.now, Auth: s.authenticate, Fail: s.fail})
	s.room = controlroom.Register(e, controlroom.Deps{
		Items: items, Pulses: d.Units, Orders: d.Orders, FirstPay: controlroom.NewFirstPay(reg),
		Books: d.Books, BooksMetrics: controlroom.NewBooksMetrics(reg),
		Temporal: d.Temporal, Now: s.now, Fail: s.fail,
		Admin: func(c *gin.Context) {
			if _, err := s.authenticate(c, auth.RoleAdmin); err != nil {
				s.fail(c, err) // aborts the chain
			}
		},
		NotFound: func(c *gin.Context) { s.fail(c, apierr.ErrNoRoute) },
	})
}

// saleRows are sale.Rows (one store.Store in production).
type saleRows struct {
	StockFence
	OrderReader
}

// metricsRenderTTL is how long one rendering of the registry serves scrapes.
const metricsRenderTTL = time.Second

// publicMetrics serves /metrics on the public listener, rendered at most once
// per metricsRenderTTL and unlimited: a flood costs a copy of the bytes and
// cannot make a scrape fail, as a limiter would (local clients share the
// scraper's loopback address).
func (s *Server) publicMetrics() gin.HandlerFunc {
	var rendered apierr.Reused[[]byte]
	return func(c *gin.Context) {
		text, err := rendered.Get(s.now, metricsRenderTTL, s.renderMetrics)
		if err != nil {
			s.fail(c, err)
			return
		}
		c.Data(http.StatusOK, string(expfmt.NewFormat(expfmt.TypeTextPlain)), text)
	}
}

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

// HTTPServer serves every route on the configured address.
func (s *Server) HTTPServer() *http.Server { return s.httpServer(s.cfg.Addr, s.engine) }

// MetricsServer serves /metrics on config.API.MetricsAddr; nil when unset.
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
			s.fail(c, apierr.ErrPayloadTooLarge)
			return
		}
		c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	}
}

// authenticate returns the request's verified principal, charged to its
// limiter and of the role asked for, if any. A request without a valid token
// is charged to its IP's limiter, so token guessing is limited too.
func (s *Server) authenticate(c *gin.Context, role auth.Role) (auth.Principal, error) {
	h := c.GetHeader("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		if p, err := s.deps.Tokens.Verify(strings.TrimSpace(h[7:])); err == nil {
			// Admins have their own limiters, keyed by the negated id.
			lim, key := s.buyers, p.UserID
			if p.Role != auth.RoleBuyer {
				lim, key = s.admins, -p.UserID
			}
			if ok, retry := lim.allow(key, s.now()); !ok {
				return p, apierr.RateLimited(retry)
			}
			if role != "" && p.Role != role {
				return p, apierr.ErrForbidden
			}
			return p, nil
		}
	}
	if err := s.allowIP(c); err != nil {
		return auth.Principal{}, err
	}
	return auth.Principal{}, apierr.ErrUnauthorized
}

// allowGlobal takes a token of the global limiter (the purchase path).
func (s *Server) allowGlobal(now time.Time) error {
	if !s.global.AllowN(now, 1) {
		return apierr.RateLimited(retryAfter(s.global, now))
	}
	return nil
}

// allowIP applies the per-IP limiter of unauthenticated traffic.
func (s *Server) allowIP(c *gin.Context) error {
	if ok, retry := s.ips.allow(ipKey(c.ClientIP()), s.now()); !ok {
		return apierr.RateLimited(retry)
	}
	return nil
}

// ipKey is the per-IP limiter's key: an IPv4 address, or an IPv6 address's
// /64 (rotating addresses inside one subscriber's network gains nothing).
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

// Run keeps the per-instance state fresh until ctx ends and owns every
// goroutine the API starts: the item read model, the order views fed to the
// event streams and the control room, and the sweep.
func (s *Server) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { s.sale.Run(ctx) })
	wg.Go(func() {
		s.deps.Views.Watch(ctx, func(v order.View) {
			s.orders.Publish(v)
			s.room.ObserveFirstPay(v)
		})
	})
	wg.Go(func() { s.sweep(ctx) })
	wg.Wait()
}

// sweep evicts idle limiters and the first pays of sales no longer shown.
func (s *Server) sweep(ctx context.Context) {
	t := time.NewTicker(max(s.cfg.LimiterIdleTTL/2, time.Second))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.buyers.sweep(now)
			s.admins.sweep(now)
			s.ips.sweep(now)
			s.room.ForgetFirstPays(now)
		}
	}
}

// readyTTL is how long a readiness result is reused (/readyz is public).
const readyTTL = time.Second

// GET /readyz: every check passed within a second; a 503 names the others
// (their reasons go to the log only).
func (s *Server) readyz(c *gin.Context) {
	down, _ := s.ready.Get(time.Now, readyTTL, func() ([]string, error) { return s.readyDown(c.Request.Context()), nil })
	checks := make(map[string]string, len(s.deps.Checks))
	for name := range s.deps.Checks {
		checks[name] = "ok"
	}
	for _, name := range down {
		checks[name] = "down"
	}
	if len(down) > 0 {
		c.JSON(http.StatusServiceUnavailable, gin.H{
			"error":  apierr.Object{Code: apierr.ErrUnavailable.Code, Message: "not ready: " + strings.Join(down, ", ") + " down"},
			"checks": checks,
		})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ready", "checks": checks})
}

// readyDown names the failing checks, sorted.
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
