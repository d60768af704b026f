package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/controlroom"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/relay"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

func newAPICmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "api",
		Short: "Serve the buyer HTTP API and relay reserved orders from the Redis outbox to RocketMQ",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAPI(cmd.Context(), a)
		},
	}
}

// runAPI starts the API's parts and serves until ctx ends. The closers run
// last first: the server drains, then the relay flushes, then the rest close.
func runAPI(ctx context.Context, a *app) (err error) {
	cfg, log := a.cfg, a.log
	if err := cfg.CheckAPISecret(); err != nil {
		return err
	}
	if err := cfg.CheckOrderSigningKey(); err != nil {
		return err
	}
	log.Info("starting api", "config", cfg.String())
	setMemoryLimit("api", cfg.API.MemoryLimitMB, log)

	d := &deps{cfg: cfg, log: log}
	defer func() { err = errors.Join(d.stoppedWhileStarting(ctx, err), d.close()) }()
	p, err := openAPIStores(ctx, d)
	if err != nil {
		return err
	}
	rel, err := newRelay(ctx, d, p.db, p.metrics)
	if err != nil {
		return err
	}

	// Only wakes need Temporal: the API serves while it dials in the background.
	tc := &temporalConn{}
	bgCtx, stopBg := context.WithCancel(ctx)
	go tc.dialLoop(bgCtx, a)
	d.onStop(func() { stopBg(); tc.close() })
	desk, err := payment.New(p.db, p.views, p.views, p.units, tc.sagas(cfg.Temporal.TaskQueue), p.metrics.WakesSkipped,
		payment.Options{WakeRate: cfg.API.WakeRate}, log)
	if err != nil {
		return err
	}
	// One provider (one limiter) for checkouts and the control room's books checks.
	prov := newProvider(d, cfg.Payment.Provider)
	pays, actions := newPayments(d, p, desk, prov, refundStarter{tc, cfg.Temporal.TaskQueue})
	apiDeps := p.apiDeps(cfg, log, desk, rel, tc)
	apiDeps.Payments, apiDeps.Actions, apiDeps.Refunds = pays, actions, refundStarter{tc, cfg.Temporal.TaskQueue}
	apiDeps.Currency = cfg.Payment.Currency
	apiDeps.Books = p.books(cfg, prov)
	if err := useOIDC(bgCtx, cfg, log, &apiDeps); err != nil {
		return err
	}
	srv := api.New(cfg.API, apiDeps)

	if err := serveAside(d, srv); err != nil {
		return err
	}

	// The relay outlives ctx: it stops only after the server has drained.
	relayCtx, stopRelay := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { rel.Run(relayCtx) })
	wg.Go(func() { srv.Run(bgCtx) })
	wg.Go(func() { desk.Run(bgCtx) })
	d.onStop(func() {
		stopBg()
		stopRelay()
		wg.Wait()
		log.Info("api stopped")
	})

	serve, err := d.listen("api", srv.HTTPServer(), cfg.API.ShutdownTimeout)
	if err != nil {
		return err
	}
	failed := serve()
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	}
}

type apiStores struct {
	db      *store.Store
	rdb     redis.UniversalClient
	units   *stock.Store
	views   *orderstatus.Board
	metrics *api.Metrics
}

// openAPIStores opens MySQL and the API's Redis client, each closed by d.
func openAPIStores(ctx context.Context, d *deps) (apiStores, error) {
	cfg := d.cfg
	db, err := d.mysql(ctx)
	if err != nil {
		return apiStores{}, err
	}
	// Not pinged: the API answers what it can while Redis is down.
	rdb, err := d.redis(ctx, redisx.Options{Timeout: config.APIRedisTimeout, Name: "seckill-api"}, false)
	if err != nil {
		return apiStores{}, err
	}
	units := stock.New(rdb, cfg.Redis.KeyPrefix)
	metrics := api.NewMetrics(prometheus.NewRegistry())
	if cfg.Redis.WaitReplicas > 0 {
		units.UseReplicaWait(cfg.Redis.WaitReplicas, cfg.Redis.WaitTimeout, metrics.ReplicaWaitShort.Inc)
	}
	return apiStores{db: db, rdb: rdb, units: units, views: orderstatus.New(rdb, cfg.Redis.KeyPrefix), metrics: metrics}, nil
}

// newRelay builds the relay on its own producer and Redis client: its
// blocking readers must not take the connections purchases wait for.
func newRelay(ctx context.Context, d *deps, db *store.Store, metrics *api.Metrics) (*relay.Relay, error) {
	cfg, log, counters := d.cfg, d.log, relay.NewMetrics(metrics.Registry())
	relayRDB, err := d.redis(ctx, redisx.Options{PoolSize: cfg.API.Relay.PoolSize, Name: "seckill-relay"}, false)
	if err != nil {
		return nil, err
	}
	producer, err := queue.NewProducer(cfg.RocketMQ)
	if err != nil {
		return nil, err
	}
	d.onStop(func() { _ = producer.Close() })
	producer.OnDegraded(func(status string) {
		counters.PublishDegraded(status)
		log.Warn("broker stored an outbox send without its full durability; not resent", "status", status)
	})
	return relay.New(outbox.New(relayRDB, cfg.Redis.KeyPrefix), producer, db, cfg.API.Relay, cfg.API.Instance, counters, log)
}

func (p apiStores) apiDeps(cfg config.Config, log *slog.Logger, desk *payment.Desk, rel *relay.Relay, tc *temporalConn) api.Deps {
	db, rdb := p.db, p.rdb
	eventKeys, _ := cfg.Events.EventKeys() // validated at load
	return api.Deps{
		EventKeys: eventKeys,
		Items:     db, Orders: db, Units: p.units, Views: p.views, Actions: desk, Stock: db,
		Tokens: auth.NewVerifier([]byte(cfg.JWTSecret.Value())), Metrics: p.metrics,
		Relay: rel, Log: log, Temporal: cfg.Temporal,
		Checks: map[string]api.Check{
			"redis":    func(ctx context.Context) error { return redisx.Ping(ctx, rdb) },
			"mysql":    db.Ping,
			"rocketmq": api.TCPCheck(append(append([]string{}, cfg.RocketMQ.NameServers...), cfg.RocketMQ.Brokers...)...),
			"temporal": tc.check,
		},
		DevSecret: cfg.DevTokenSecret(),
	}
}

// books is what the control room's books check reads: the sale's snapshot
// from MySQL and Redis (not its sagas: an order's window plus the grace
// says it is closed) and, with a provider, its own ledger within
// controlroom.BooksBudget, judged as seckill reconcile judges.
func (p apiStores) books(cfg config.Config, prov provider.Provider) controlroom.Books {
	b := controlroom.Books{Sources: snapshot.Sources{MySQL: p.db, Redis: p.units},
		RequirePayments: cfg.Payment.Provider == "stripe", Grace: cfg.Reconcile.Grace}
	if prov != nil {
		b.Ledger = books.Ledger{Name: cfg.Payment.Provider, Recorder: prov, Budget: controlroom.BooksBudget}
	}
	return b
}

// useOIDC makes d take the identity provider's tokens (HS256 ones too while
// SECKILL_JWT_SECRET is set) and not ready until its keys were fetched once.
func useOIDC(ctx context.Context, cfg config.Config, log *slog.Logger, d *api.Deps) error {
	o := cfg.Auth.OIDC
	if !o.On() {
		return nil
	}
	v, err := auth.NewOIDC(ctx, auth.OIDCOptions{Issuer: o.Issuer, JWKSURL: o.JWKSURL, Audience: o.Audience,
		BuyerClaim: o.BuyerClaim, AdminClaim: o.AdminClaim, AdminValue: o.AdminValue,
		Refresh: o.Refresh, UnknownKID: o.UnknownKIDRefresh, Log: log})
	if err != nil {
		return err
	}
	either := auth.Either{OIDC: v}
	if s := cfg.JWTSecret.Value(); s != "" {
		either.HS256 = auth.NewVerifier([]byte(s))
	}
	d.Tokens, d.Checks["oidc"] = either, v.Ready
	return nil
}

// serveAside starts the side listeners: pprof when configured, the API's metrics.
func serveAside(d *deps, srv *api.Server) error {
	for what, aside := range map[string]*http.Server{"pprof": pprofServer(d.cfg.API.PprofAddr), "api metrics": srv.MetricsServer()} {
		if aside == nil {
			continue
		}
		serve, err := d.listen(what, aside, time.Second)
		if err != nil {
			return err
		}
		serve()
	}
	return nil
}

// pprofServer serves net/http/pprof on addr (nil when empty).
func pprofServer(addr string) *http.Server {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

// temporalConn holds the Temporal client once dialled.
type temporalConn struct{ atomic.Pointer[client.Client] }

func (t *temporalConn) dialLoop(ctx context.Context, a *app) {
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		c, err := temporalx.Dial(dctx, a.cfg.Temporal, a.log)
		cancel()
		if err == nil {
			t.Store(&c)
			a.log.Info("temporal connected", "address", a.cfg.Temporal.Address)
			return
		}
		a.log.Warn("temporal not reachable; pays and cancels are recorded, sagas woken at their deadline", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

func (t *temporalConn) check(ctx context.Context) error {
	c := t.Load()
	if c == nil {
		return errors.New("not connected")
	}
	_, err := (*c).CheckHealth(ctx, &client.CheckHealthRequest{})
	return err
}

// refundStarter starts PaymentRefund workflows once Temporal is connected.
type refundStarter struct {
	tc        *temporalConn
	taskQueue string
}

func (r refundStarter) StartRefund(ctx context.Context, orderID, paymentID, reason string) error {
	return r.start(ctx, orderID, paymentID, reason, (*workflows.Client).StartRefund)
}

// StartSupportRefund starts support's refund of a PAID order (api/support).
func (r refundStarter) StartSupportRefund(ctx context.Context, orderID, paymentID, reason string) error {
	return r.start(ctx, orderID, paymentID, reason, (*workflows.Client).StartSupportRefund)
}

func (r refundStarter) start(ctx context.Context, orderID, paymentID, reason string,
	start func(*workflows.Client, context.Context, string, string, string) error) error {
	c := r.tc.Load()
	if c == nil {
		return fmt.Errorf("start refund of payment %s: %w", paymentID, apierr.ErrUnavailable)
	}
	return start(workflows.NewClient(*c, r.taskQueue), ctx, orderID, paymentID, reason)
}

func (t *temporalConn) close() {
	if c := t.Load(); c != nil {
		(*c).Close()
	}
}

// sagas is the saga client once Temporal is connected (until then wakes are skipped).
func (t *temporalConn) sagas(taskQueue string) func() (payment.Sagas, error) {
	return func() (payment.Sagas, error) {
		c := t.Load()
		if c == nil {
			return nil, apierr.ErrUnavailable
		}
		return workflows.NewClient(*c, taskQueue), nil
	}
}
