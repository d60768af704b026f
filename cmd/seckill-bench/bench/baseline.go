package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
)

// bareBody is what the bare endpoint answers: about the size of the API's
// SOLD_OUT error.
var bareBody = []byte(`{"error":{"code":"SOLD_OUT","message":"sold out"}}`)

// BarePath is the bare endpoint's route.
const BarePath = "/bench/fixed"

// BareGin is the HTTP ceiling of the machine: gin (release mode, set by
// main), no middleware at all, one route that writes a fixed JSON body.
func BareGin() http.Handler {
	e := gin.New()
	h := func(c *gin.Context) { c.Data(http.StatusOK, "application/json; charset=utf-8", bareBody) }
	e.POST(BarePath, h)
	e.GET(BarePath, h)
	e.GET("/healthz", func(c *gin.Context) { c.Data(http.StatusOK, "application/json", []byte(`{"status":"ok"}`)) })
	return e
}

// ServeBareGin serves BareGin on addr until ctx ends.
func ServeBareGin(ctx context.Context, addr string) error {
	srv := &http.Server{Addr: addr, Handler: BareGin(), ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// LuaResult is the direct reservation baseline.
type LuaResult struct {
	Reservations int64   `json:"reservations"`
	Seconds      float64 `json:"seconds"`
	PerSecond    float64 `json:"per_second"`
	Errors       int64   `json:"errors"`
}

// LuaBaseline reserves through the API's own reservation path
// (stock.Store.Reserve: the batched script and the QUEUED view) directly
// through go-redis from concurrency goroutines, one distinct buyer per call,
// until units are sold. Its keys live under a private prefix and are deleted
// afterwards.
func LuaBaseline(ctx context.Context, cfg config.Redis, prefix string, concurrency int, units int64) (LuaResult, error) {
	rdb, err := redisx.Open(cfg, redisx.Options{PoolSize: concurrency, Name: "seckill-bench-lua"})
	if err != nil {
		return LuaResult{}, err
	}
	defer func() { _ = rdb.Close() }()
	st := stock.New(rdb, prefix)
	const item = 1
	k := st.ItemKeys(item)
	defer func() {
		dctx := context.WithoutCancel(ctx)
		// The QUEUED views are keys of their own, one per order.
		ids, _ := rdb.HKeys(dctx, k.Orders).Result()
		_, _ = rdb.Pipelined(dctx, func(p redis.Pipeliner) error {
			for _, id := range ids {
				p.Del(dctx, keyspace.Order(prefix, id))
			}
			return nil
		})
		// One item's keys share a hash slot: one DEL works on a cluster too.
		rdb.Del(dctx, k.Stock, k.Buyers, k.Orders, k.Outbox)
	}()
	rdb.Del(ctx, k.Stock, k.Buyers, k.Orders, k.Outbox)
	if _, err := st.Load(ctx, item, units); err != nil {
		return LuaResult{}, err
	}
	var next, ok, errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for g := 0; g < concurrency; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				u := next.Add(1)
				_, err := st.Reserve(ctx, order.Message{OrderID: order.NewID(), ItemID: item, UserID: u, ReservedAt: time.Now().UTC()})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, stock.ErrSoldOut):
					return
				default:
					errs.Add(1)
					if errs.Load() > 1000 {
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	r := LuaResult{Reservations: ok.Load(), Seconds: el, PerSecond: float64(ok.Load()) / el, Errors: errs.Load()}
	if r.Errors > 1000 {
		return r, fmt.Errorf("direct lua baseline: too many errors")
	}
	return r, nil
}

// minimalStep is a no-op local activity.
func minimalStep(context.Context, int) error { return nil }

// MinimalWorkflow is the saga's baseline: three no-op local activities.
func MinimalWorkflow(ctx workflow.Context, n int) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	for i := 0; i < 3; i++ {
		if err := workflow.ExecuteLocalActivity(ctx, minimalStep, i).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// WaitTimer is how long WaitingWorkflow waits.
const WaitTimer = time.Second

// WaitingWorkflow is stage 4's yardstick, the shape of a saga that waits for
// its payment: a no-op local activity, a timer (WaitTimer), a no-op local
// activity. Unlike MinimalWorkflow it needs two workflow tasks and a timer.
func WaitingWorkflow(ctx workflow.Context, n int) error {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 10 * time.Second})
	if err := workflow.ExecuteLocalActivity(ctx, minimalStep, 0).Get(ctx, nil); err != nil {
		return err
	}
	if err := workflow.Sleep(ctx, WaitTimer); err != nil {
		return err
	}
	return workflow.ExecuteLocalActivity(ctx, minimalStep, 1).Get(ctx, nil)
}

// BaselineWorkflow is a workflow the Temporal baseline runs, and the name it
// is registered under.
type BaselineWorkflow struct {
	Name string
	Fn   func(workflow.Context, int) error
}

// The two Temporal baselines: one workflow task, and a wait between two.
var (
	Minimal = BaselineWorkflow{Name: "BenchMinimalWorkflow", Fn: MinimalWorkflow}
	Waiting = BaselineWorkflow{Name: "BenchWaitingWorkflow", Fn: WaitingWorkflow}
)

// WorkflowResult is a Temporal baseline.
type WorkflowResult struct {
	Workflows int     `json:"workflows"`
	Seconds   float64 `json:"seconds"`
	PerSecond float64 `json:"per_second"`
}

// baselineStarters is how many goroutines start minimal workflows: what a
// plain SDK client would use to push a few thousand workflows.
const baselineStarters = 32

// WorkflowBaseline is the Temporal engine at its best as a user would get it
// alone: n workflows of the given shape started by baselineStarters goroutines with eager
// start, on a private task queue served by a worker in this process with the
// SDK's default options, completions counted inside the worker (no result
// polling: no long polls compete with the server's work). It measures from the
// first start to the last completion. Nothing of the saga's settings is
// copied: the baseline must not share our overheads.
func WorkflowBaseline(ctx context.Context, cfg config.Temporal, taskQueue string, n int, wf BaselineWorkflow) (WorkflowResult, error) {
	// A client of its own with the SDK's defaults (only a quiet logger): not
	// the pipeline's tuned one.
	c, err := client.DialContext(ctx, client.Options{HostPort: cfg.Address, Namespace: cfg.Namespace,
		Logger: tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		return WorkflowResult{}, fmt.Errorf("dial temporal for the baseline: %w", err)
	}
	defer c.Close()
	var done atomic.Int64
	finished := make(chan struct{})
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, i int) error {
		err := wf.Fn(ctx, i)
		if err == nil && !workflow.IsReplaying(ctx) && done.Add(1) == int64(n) {
			close(finished)
		}
		return err
	}, workflow.RegisterOptions{Name: wf.Name})
	if err := w.Start(); err != nil {
		return WorkflowResult{}, err
	}
	defer w.Stop()
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for range baselineStarters {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) || ctx.Err() != nil {
					return
				}
				err := startBaseline(ctx, c, client.StartWorkflowOptions{
					ID: fmt.Sprintf("%s-%d", taskQueue, i), TaskQueue: taskQueue, EnableEagerStart: true,
				}, wf.Name, int(i))
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return WorkflowResult{}, fmt.Errorf("start %s: %w", wf.Name, firstErr)
	}
	select {
	case <-finished:
	case <-ctx.Done():
		return WorkflowResult{}, fmt.Errorf("%s: %d of %d completed: %w", wf.Name, done.Load(), n, ctx.Err())
	}
	el := time.Since(start).Seconds()
	return WorkflowResult{Workflows: n, Seconds: el, PerSecond: float64(n) / el}, nil
}

// startBaseline starts one baseline workflow, as a user's starter would:
// a start that timed out (a busy server) is sent again, and one already
// started by the timed-out attempt counts.
func startBaseline(ctx context.Context, c client.Client, opts client.StartWorkflowOptions, name string, i int) error {
	var err error
	for try := 0; try < 5; try++ {
		_, err = c.ExecuteWorkflow(ctx, opts, name, i)
		var started *serviceerror.WorkflowExecutionAlreadyStarted
		switch {
		case err == nil, try > 0 && errors.As(err, &started):
			return nil
		case ctx.Err() != nil || !timedOut(err):
			return err
		}
	}
	return err
}

// timedOut reports whether a start failed for want of an answer in time.
func timedOut(err error) bool {
	var de *serviceerror.DeadlineExceeded
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) || status.Code(err) == codes.DeadlineExceeded
}
