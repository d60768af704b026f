package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

func newWorkerCmd(a *app) *cobra.Command {
	var consumer, temporal bool
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the order consumer (RocketMQ -> OrderSaga, dead letters) and the Temporal saga worker",
		Long: "Runs both roles by default. --consumer=false runs only the Temporal worker; --temporal=false only the\n" +
			"consumers. Without the flags SECKILL_WORKER_CONSUMER and SECKILL_WORKER_TEMPORAL decide.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.cfg
			if cmd.Flags().Changed("consumer") {
				cfg.Worker.Consumer = consumer
			}
			if cmd.Flags().Changed("temporal") {
				cfg.Worker.Temporal = temporal
			}
			a.log.Info("seckill worker starting", "consumer", cfg.Worker.Consumer, "temporal", cfg.Worker.Temporal)
			setMemoryLimit("worker", cfg.Worker.MemoryLimitMB, a.log)
			return runWorker(cmd.Context(), cfg, a.log)
		},
	}
	cmd.Flags().BoolVar(&consumer, "consumer", true, "run the RocketMQ order and dead-letter consumers")
	cmd.Flags().BoolVar(&temporal, "temporal", true, "run the Temporal worker for OrderSaga")
	return cmd
}

// runWorker assembles the roles cfg.Worker enables (Consumer: the order and
// dead-letter consumers; Temporal: the saga worker), serves /metrics, and
// blocks until ctx ends; then it stops taking messages first, lets the
// Temporal worker finish its tasks, stops /metrics and closes the
// connections, and returns what went wrong on the way.
func runWorker(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	if !cfg.Worker.Consumer && !cfg.Worker.Temporal {
		return errors.New("worker: nothing to run (both --consumer and --temporal are off)")
	}
	d := newDeps(cfg, log)
	defer d.close()
	tc, err := d.temporal(ctx)
	if err != nil {
		return err
	}
	st, err := d.mysql(ctx)
	if err != nil {
		return err
	}
	rdb, err := d.redis(ctx, redisx.Options{Name: "seckill-worker"}, true)
	if err != nil {
		return err
	}
	units := stock.New(rdb, cfg.Redis.KeyPrefix)
	views := orderstatus.New(rdb, cfg.Redis.KeyPrefix)
	metrics := worker.NewMetrics()

	var consumers []*queue.Consumer
	var w sdkworker.Worker
	gate := worker.NewGate()
	metrics.ObserveGate(gate)
	// Teardown, in this order: take no more messages (held ones are not
	// acknowledged and come back later; a start in flight finishes or its
	// message is redelivered, and a redelivered start is a no-op by workflow
	// ID), then let the Temporal worker finish its tasks, then (deferred
	// above) close the connections.
	teardown := func() error {
		gate.Close()
		var errs []error
		for _, c := range consumers {
			if err := c.Close(); err != nil {
				errs = append(errs, fmt.Errorf("close consumer: %w", err))
			}
		}
		if w != nil {
			w.Stop()
		}
		return errors.Join(errs...)
	}
	stopped := false
	defer func() {
		if !stopped { // a start-up error
			_ = teardown()
		}
	}()
	if cfg.Worker.Temporal {
		if cfg.Worker.StickyCacheSize > 0 {
			// Process-wide; must precede the first worker. The SDK's default
			// (10,000) keeps every parked saga of a full sale in memory.
			sdkworker.SetStickyWorkflowCacheSize(cfg.Worker.StickyCacheSize)
		}
		tw := worker.NewTemporalWorker(tc, cfg.Temporal.TaskQueue, cfg.Worker, activities.New(st, views, metrics.Payable),
			compensation.New(st, units, metrics.PhantomUnits, metrics.Refunds))
		if err := tw.Start(); err != nil {
			return fmt.Errorf("start temporal worker on %s: %w", cfg.Temporal.TaskQueue, err)
		}
		w = tw
		log.Info("saga worker polling", "task_queue", cfg.Temporal.TaskQueue, "temporal", cfg.Temporal.Address)
	}
	if cfg.Worker.Consumer {
		starter := workflows.NewClient(tc, cfg.Temporal.TaskQueue).WithEagerStart(cfg.Worker.EagerStart && cfg.Worker.Temporal)
		// From the first offset: a consumer group's very first start would
		// otherwise begin at the end of the topic and skip every order sent
		// before it. Re-reading retained messages is harmless: a start of an
		// existing saga is a success, and a late saga stands down (ORDER_CLOSED).
		c, err := worker.StartOrderConsumer(cfg.RocketMQ, cfg.Worker.ConsumeWorkers, true, log,
			gate.Handler(worker.OrderHandler(starter, metrics, log, cfg.Worker.StartTimeout)))
		if err != nil {
			return err
		}
		consumers = append(consumers, c)
		dlq, err := worker.StartDeadLetterConsumer(ctx, cfg.RocketMQ, cfg.Worker.DLQGroup, log,
			worker.DeadLetterHandlerFunc(starter, metrics, log, cfg.Worker.StartTimeout))
		if err != nil {
			return err
		}
		consumers = append(consumers, dlq)
		log.Info("order consumer running", "topic", cfg.RocketMQ.Topic, "group", cfg.RocketMQ.ConsumerGroup,
			"dead_letter_topic", worker.DeadLetterTopic(cfg.RocketMQ.ConsumerGroup), "dead_letter_group", cfg.Worker.DLQGroup)
	}

	if cfg.Worker.Temporal && cfg.Reconcile.Interval > 0 {
		r := reconcile.New(reconcile.Deps{MySQL: st, Units: units, Outbox: outbox.New(rdb, cfg.Redis.KeyPrefix),
			Sagas:     workflows.NewClient(tc, cfg.Temporal.TaskQueue),
			Workflows: snapshot.TemporalLister{Client: tc, Namespace: cfg.Temporal.Namespace}}, cfg.Reconcile.Grace, log)
		rctx, stopReconcile := context.WithCancel(ctx)
		defer stopReconcile()
		go worker.RunReconcile(rctx, r, cfg.Reconcile, metrics, log)
		log.Info("reconcile running", "interval", cfg.Reconcile.Interval, "repair", cfg.Reconcile.Repair)
	}

	// The ops listener's admin switch holds the order consumer (no saga
	// starts; messages wait in the worker's buffer, then in the broker): an
	// operator's lever while Temporal is being worked on (`seckill consumer
	// hold`), and how the bench keeps sagas out of its purchase stage.
	var verifier *auth.Verifier
	if err := cfg.CheckAPISecret(); err != nil {
		log.Warn("the order consumer's admin switch is off", "err", err)
	} else {
		verifier = auth.NewVerifier([]byte(cfg.JWTSecret.Value()))
	}
	var held *worker.Gate
	if cfg.Worker.Consumer {
		held = gate
	}
	srv := &http.Server{Handler: worker.OpsHandler(metrics, held, verifier, log), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", cfg.Worker.MetricsAddr)
	if err != nil {
		return fmt.Errorf("metrics listener %s: %w", cfg.Worker.MetricsAddr, err)
	}
	srvErr := make(chan error, 1)
	go func() { srvErr <- srv.Serve(ln) }()
	log.Info("worker metrics", "addr", "http://"+ln.Addr().String()+"/metrics")

	select {
	case <-ctx.Done():
		log.Info("worker stopping: consumers first, then the Temporal worker")
		stopped = true
		err := teardown()
		return errors.Join(err, shutdownHTTP(srv))
	case err := <-srvErr:
		return fmt.Errorf("metrics server: %w", err)
	}
}

// shutdownHTTP stops the metrics server (last: it reports until the end).
func shutdownHTTP(srv *http.Server) error {
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics server shutdown: %w", err)
	}
	return nil
}
