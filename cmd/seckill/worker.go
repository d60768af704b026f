package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

func newWorkerCmd(a *app) *cobra.Command {
	var consumer, temporal bool
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the order consumer (RocketMQ -> OrderSaga, dead letters) and the Temporal saga worker",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.cfg
			cfg.Worker.Consumer = orSetting(cmd, "consumer", consumer, cfg.Worker.Consumer)
			cfg.Worker.Temporal = orSetting(cmd, "temporal", temporal, cfg.Worker.Temporal)
			a.log.Info("seckill worker starting", "consumer", cfg.Worker.Consumer, "temporal", cfg.Worker.Temporal)
			setMemoryLimit("worker", cfg.Worker.MemoryLimitMB, a.log)
			return runWorker(cmd.Context(), cfg, a.log)
		},
	}
	cmd.Flags().BoolVar(&consumer, "consumer", true, "run the RocketMQ order and dead-letter consumers (overrides SECKILL_WORKER_CONSUMER)")
	cmd.Flags().BoolVar(&temporal, "temporal", true, "run the Temporal worker for OrderSaga (overrides SECKILL_WORKER_TEMPORAL)")
	return cmd
}

// runWorker starts the parts cfg.Worker enables and blocks until ctx ends or
// the ops listener fails; the closers then run last first.
func runWorker(ctx context.Context, cfg config.Config, log *slog.Logger) (err error) {
	if !cfg.Worker.Consumer && !cfg.Worker.Temporal {
		return errors.New("worker: nothing to run (both --consumer and --temporal are off)")
	}
	if cfg.Worker.Consumer {
		if err := cfg.CheckOrderSigningKey(); err != nil {
			return err
		}
	}
	gate := worker.NewGate()
	w := &workerParts{deps: &deps{cfg: cfg, log: log}, metrics: worker.NewMetrics(gate), gate: gate}
	defer func() { err = errors.Join(w.stoppedWhileStarting(ctx, err), w.close()) }()
	if w.tc, err = w.temporal(ctx); err != nil {
		return err
	}
	if w.st, err = w.mysql(ctx); err != nil {
		return err
	}
	if w.rdb, err = w.redis(ctx, redisx.Options{Name: "seckill-worker"}, true); err != nil {
		return err
	}
	serve, err := w.listenOps()
	if err != nil {
		return err
	}
	if err := w.checkProvider(ctx); err != nil {
		return err
	}
	// One provider, one limiter on its rate, for the saga's steps and
	// reconcile's books (each made its own: twice the rate the setting allows).
	w.prov = newProvider(w.deps, cfg.Payment.Provider)
	for _, start := range []func(context.Context) error{w.startTemporal, w.startConsumers, w.startReconcile, w.startRefunds, w.startEvents} {
		if err := start(ctx); err != nil {
			return err
		}
	}
	served := serve()
	select {
	case <-ctx.Done():
		log.Info("worker stopping: consumers first, then the Temporal worker")
		return nil
	case err := <-served:
		return err
	}
}

type workerParts struct {
	*deps
	tc      client.Client
	st      *store.Store
	rdb     redis.UniversalClient
	prov    provider.Provider // SECKILL_PAYMENT_PROVIDER's, behind one limiter; nil: door
	metrics *worker.Metrics
	gate    *worker.Gate // the admin switch's hold on the order consumer
}

// listenOps binds the ops listener first, so that its stop runs last.
func (w *workerParts) listenOps() (serve func() <-chan error, err error) {
	var verifier *auth.Verifier
	if err := w.cfg.CheckAPISecret(); err != nil {
		w.log.Warn("the order consumer's admin switch is off", "err", err)
	} else if w.cfg.JWTSecret == "" {
		w.log.Info("the order consumer's admin switch is off: it takes HS256 admin tokens and SECKILL_JWT_SECRET is unset")
	} else {
		verifier = auth.NewVerifier([]byte(w.cfg.JWTSecret.Value()))
	}
	var held *worker.Gate
	if w.cfg.Worker.Consumer {
		held = w.gate
	}
	srv := &http.Server{Addr: w.cfg.Worker.MetricsAddr, Handler: worker.OpsHandler(w.metrics, held, verifier, w.log), ReadHeaderTimeout: 5 * time.Second}
	return w.listen("worker ops", srv, 10*time.Second)
}

// startTemporal starts the saga worker; its stop lets it finish its tasks.
func (w *workerParts) startTemporal(context.Context) error {
	cfg := w.cfg
	if !cfg.Worker.Temporal {
		return nil
	}
	if cfg.Worker.StickyCacheSize > 0 {
		sdkworker.SetStickyWorkflowCacheSize(cfg.Worker.StickyCacheSize) // process-wide: before the first worker
	}
	views, units := orderstatus.New(w.rdb, cfg.Redis.KeyPrefix), stock.New(w.rdb, cfg.Redis.KeyPrefix)
	comp := compensation.New(w.st, units, w.metrics.PhantomUnits, w.metrics.Refunds)
	name := cfg.Payment.Provider
	// The saga cancels and refunds through the provider (door: none, and a
	// payment found with one fails its step until a worker that has it runs).
	comp = compensation.WithPayments(comp, compensation.Payments{Provider: w.prov, Name: name, Store: w.st, Failures: w.metrics.RefundFailures})
	tw := worker.NewTemporalWorker(w.tc, cfg.Temporal.TaskQueue, cfg.Worker, activities.New(w.st, views, w.metrics.Payable), comp)
	if err := tw.Start(); err != nil {
		return fmt.Errorf("start temporal worker on %s: %w", cfg.Temporal.TaskQueue, err)
	}
	w.onStop(tw.Stop)
	w.log.Info("saga worker polling", "task_queue", cfg.Temporal.TaskQueue, "temporal", cfg.Temporal.Address, "payments", name)
	return nil
}

func (w *workerParts) startConsumers(ctx context.Context) error {
	cfg := w.cfg
	if !cfg.Worker.Consumer {
		return nil
	}
	starter := workflows.NewClient(w.tc, cfg.Temporal.TaskQueue).WithEagerStart(cfg.Worker.EagerStart && cfg.Worker.Temporal).
		WithPayments(viaProvider(cfg))
	signer := queue.NewSigner(cfg.RocketMQ)
	handler := func(src worker.Source) queue.Handler {
		return worker.Handler(src, starter, signer, w.metrics, w.log, cfg.Worker.StartTimeout)
	}
	c, err := worker.StartOrderConsumer(cfg.RocketMQ, cfg.Worker.ConsumeWorkers, w.log, w.gate.Handler(handler(worker.Orders)))
	if err != nil {
		return err
	}
	w.onClose(c.Close)
	w.onStop(w.gate.Close) // first: held handlers give their messages back
	if c, err = worker.StartDeadLetterConsumer(ctx, cfg.RocketMQ, cfg.Worker.DLQGroup, w.log, handler(worker.DeadLetters)); err != nil {
		return err
	}
	w.onClose(c.Close)
	w.log.Info("order consumer running", "topic", cfg.RocketMQ.Topic, "group", cfg.RocketMQ.ConsumerGroup,
		"dead_letter_topic", worker.DeadLetterTopic(cfg.RocketMQ.ConsumerGroup), "dead_letter_group", cfg.Worker.DLQGroup)
	return nil
}

// startReconcile runs the periodic drift check beside the saga worker.
func (w *workerParts) startReconcile(ctx context.Context) error {
	rc := w.cfg.Reconcile
	if !w.cfg.Worker.Temporal || rc.Interval <= 0 {
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	w.onStop(stop)
	go worker.RunReconcile(ctx, newReconciler(w.cfg, w.st, w.rdb, w.tc, w.prov, rc.Grace, w.log), rc, w.metrics, w.log)
	w.log.Info("reconcile running", "interval", rc.Interval, "repair", rc.Repair)
	return nil
}

// checkProvider refuses a saga worker that could not cancel or refund the
// money MySQL holds open: a payment pending or a refund owed through
// another provider than its own (a rolling change of the setting).
func (w *workerParts) checkProvider(ctx context.Context) error {
	if !w.cfg.Worker.Temporal {
		return nil
	}
	open, err := w.st.OpenMoney(ctx)
	if err != nil {
		return err
	}
	for prov, n := range open {
		if prov != w.cfg.Payment.Provider {
			return fmt.Errorf("worker: MySQL holds %d pending payments or owed refunds through provider %q, and this worker's "+
				"SECKILL_PAYMENT_PROVIDER is %q: it could not cancel or refund them; run it with SECKILL_PAYMENT_PROVIDER=%s "+
				"(and that provider's settings) until they are settled", n, prov, w.cfg.Payment.Provider, prov)
		}
	}
	return nil
}

// startRefunds runs the driver of owed refunds beside the saga worker.
func (w *workerParts) startRefunds(ctx context.Context) error {
	rc := w.cfg.Refunds
	if !w.cfg.Worker.Temporal || rc.Interval <= 0 || w.prov == nil {
		return nil
	}
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		worker.RunRefunds(ctx, w.st, workflows.NewClient(w.tc, w.cfg.Temporal.TaskQueue), w.cfg.Payment.Provider, rc, w.metrics, w.log)
	}()
	w.onStop(func() { stop(); <-done })
	w.log.Info("refund driver running", "interval", rc.Interval, "idle", rc.Idle, "grace", rc.Grace)
	return nil
}

// startEvents runs the order events publisher; its stop waits for the round
// in flight, before the producer closes.
func (w *workerParts) startEvents(ctx context.Context) error {
	if !w.cfg.Events.Publish {
		return nil
	}
	signer, err := eventSigner(w.cfg)
	if err != nil {
		return err
	}
	pub, err := queue.NewKeyedProducer(w.cfg.RocketMQ)
	if err != nil {
		return err
	}
	w.onClose(pub.Close)
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		events.New(w.st, events.Signed(pub, signer), w.cfg.Events, events.NewMetrics(w.metrics.Registerer()), w.log).Run(ctx)
	}()
	w.onStop(func() { stop(); <-done })
	w.log.Info("order events publisher standing by", "topic", w.cfg.Events.Topic)
	return nil
}
