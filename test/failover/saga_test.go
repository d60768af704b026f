// Saga failure tests: the worker stopped with SIGTERM mid-stream; the
// Temporal server stopped for 30 s while order messages arrive; MariaDB
// and Redis each stopped for 60 s (twice the saga steps' local retry budget)
// during a 500-unit sale. They stop
// shared processes, so they run only with SECKILL_FAILOVER=1, serially:
//
//	flock /tmp/seckill-failover.lock env SECKILL_FAILOVER=1 go test ./test/failover/ -run Saga -v
//
// A worker killed -9 mid-saga is test/cluster's "kill -9 worker-1" sale, which
// proves everything the former TestSagaWorkerKilledMidSaga here did and more.

package failover_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

// sagaEnv is a private slice of the stack served by child `seckill worker`
// processes.
type sagaEnv struct {
	t        *testing.T
	root     string
	bin      string
	env      []string
	st       *store.Store
	stk      *stock.Store
	views    *orderstatus.Board
	tc       client.Client
	orders   *workflows.Client
	desk     *payment.Desk
	producer *queue.Producer
	item     store.Item
	logs     string
	cfg      config.Config
}

func newSagaEnv(t *testing.T, units int64, window time.Duration) *sagaEnv {
	t.Helper()
	root := testkit.RepoRoot(t)
	dir := t.TempDir()
	bin := testkit.SeckillBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	st, rdb, prefix, cfg := s.Store, s.Redis, s.Config.Redis.KeyPrefix, s.Config
	it := s.Sale(ctx, t, "saga failover", units, window)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	tc := s.Temporal(ctx, t, log)
	producer, err := queue.NewProducer(cfg.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producer.Close() })
	env := s.Env()
	taskQueue := cfg.Temporal.TaskQueue
	orders := workflows.NewClient(tc, taskQueue)
	desk := testkit.Desk(t, st, orderstatus.New(rdb, prefix), s.Stock, orders, log)
	return &sagaEnv{t: t, root: root, bin: bin, env: env, st: st, stk: s.Stock, views: orderstatus.New(rdb, prefix), tc: tc, orders: orders, desk: desk,
		producer: producer, item: it, logs: filepath.Join(dir, "worker.log"), cfg: cfg}
}

// startWorker runs `seckill worker` (consumer and Temporal worker) as a child.
func (e *sagaEnv) startWorker(name string) *child {
	e.t.Helper()
	addr := testkit.FreeAddr(e.t)
	env := append(append([]string{}, e.env...), "SECKILL_WORKER_METRICS_ADDR="+addr)
	return startChild(e.t, e.bin, e.logs, name, env, "worker")
}

func (e *sagaEnv) buy(userID int64) order.Message {
	e.t.Helper()
	m := order.Message{OrderID: order.NewID(), ItemID: e.item.ID, UserID: userID, ReservedAt: time.Now().UTC()}
	if _, err := e.stk.Reserve(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
	if err := e.producer.PublishOrder(context.Background(), m); err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *sagaEnv) status(orderID string) order.Status {
	o, err := e.st.FindOrder(context.Background(), orderID)
	if err != nil {
		return ""
	}
	return o.Status
}

// settled is the order's status once the saga has finished with it: the row
// is final and the saga's last step (Notify, after the Redis release) has
// published the same status; "" before that.
func (e *sagaEnv) settled(orderID string) order.Status {
	s := e.status(orderID)
	v, ok, err := e.views.Status(context.Background(), orderID)
	if !s.Final() || err != nil || !ok || v.Status != s {
		return ""
	}
	return s
}

// waitAll waits until every order's row satisfies ok.
func (e *sagaEnv) waitAll(ms []order.Message, within time.Duration, what string, ok func(order.Status) bool) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var behind []string
		for _, m := range ms {
			s := e.status(m.OrderID)
			if s.Final() {
				s = e.settled(m.OrderID)
			}
			if !ok(s) {
				behind = append(behind, m.OrderID+"="+string(s))
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%d of %d orders not %s after %s: %v", len(behind), len(ms), what, within, behind)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkUnits checks that both stocks hold units minus the paid orders and
// that no unit was given back twice.
func (e *sagaEnv) checkUnits(ms []order.Message, units int64) {
	e.t.Helper()
	ctx := context.Background()
	var paid int64
	for _, m := range ms {
		switch e.status(m.OrderID) {
		case order.StatusPaid:
			paid++
			if _, ok, _ := e.stk.Reservation(ctx, e.item.ID, m.OrderID); !ok {
				e.t.Errorf("paid order %s lost its reservation", m.OrderID)
			}
		case order.StatusCancelled:
			if d, ok, err := testkit.Deduction(ctx, e.st, m.OrderID); !ok || err != nil || !d.Restored {
				e.t.Errorf("cancelled order %s: deduction %+v %v, want restored", m.OrderID, d, err)
			}
		default:
			e.t.Errorf("order %s ended %s", m.OrderID, e.status(m.OrderID))
		}
	}
	state, err := e.st.ReadItemState(ctx, e.item.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	row := state.Stock
	left, err := e.stk.Left(ctx, e.item.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	if row.Stock != units-paid || left != units-paid {
		e.t.Fatalf("stock row %d, redis %d; want both %d (%d units, %d paid)", row.Stock, left, units-paid, units, paid)
	}
	var n int64
	e.st.DB().Model(&store.Order{}).Where("item_id = ?", e.item.ID).Count(&n)
	if n != int64(len(ms)) {
		e.t.Fatalf("%d order rows for %d orders", n, len(ms))
	}
}

// pay pays as the API does (judged at the door); a window that closed first
// is a valid outcome.
func (e *sagaEnv) pay(m order.Message) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if v, err := e.desk.Pay(ctx, m.OrderID, m.UserID, time.Now()); err != nil || v.Status != order.StatusPaid {
		e.t.Logf("pay %s: %q %v", m.OrderID, v.Status, err)
	}
}

// stack runs scripts/stack with args (stop/start a service).
func (e *sagaEnv) stack(args ...string) {
	e.t.Helper()
	if _, err := runStack(e.root, args...); err != nil {
		e.t.Error(err)
	}
}

// invariants runs the checker the bench uses over the item: MySQL, Redis and
// Temporal against the accepted orders.
func (e *sagaEnv) invariants(ms []order.Message, afterTimeouts bool) invariant.Report {
	e.t.Helper()
	acc := make([]invariant.Accepted, len(ms))
	for i, m := range ms {
		acc[i] = invariant.Accepted{OrderID: m.OrderID, UserID: m.UserID}
	}
	deps := invariant.Deps{Store: e.st, Stock: e.stk,
		Workflows: snapshot.TemporalLister{Client: e.tc, Namespace: e.cfg.Temporal.Namespace}}
	var rep invariant.Report
	for range 5 { // visibility catches up with the last closes
		var err error
		rep, err = invariant.Check(context.Background(), deps, invariant.Input{ItemID: e.item.ID, Accepted: acc,
			AcceptedComplete: true, AfterTimeouts: afterTimeouts})
		if err != nil {
			e.t.Fatal(err)
		}
		if rep.OK() {
			break
		}
		time.Sleep(2 * time.Second)
	}
	return rep
}

func pending(s order.Status) bool { return s == order.StatusPendingPayment || s.Final() }
func final(s order.Status) bool   { return s == order.StatusPaid || s == order.StatusCancelled }

// The worker is stopped with SIGTERM while messages stream in: it stops taking
// messages before it stops its Temporal worker, exits cleanly, and a new
// worker finishes the rest. No order is lost, none gets a second saga, row or
// unit.
func TestSagaWorkerGracefulStopMidStream(t *testing.T) {
	requireEnabled(t)
	const units, n = 80, 60
	e := newSagaEnv(t, units, time.Hour)
	w := e.startWorker("worker-1")
	var ms []order.Message
	for i := range n / 3 {
		ms = append(ms, e.buy(int64(100+i)))
	}
	// Stop once the first orders are through, with the rest in flight: the
	// other two thirds are published while the worker shuts down.
	for e.status(ms[0].OrderID) == "" {
		time.Sleep(5 * time.Millisecond)
	}
	if err := w.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i := n / 3; i < n; i++ {
		ms = append(ms, e.buy(int64(100+i)))
	}
	w.exitsCleanly(t, "worker-1")
	e.startWorker("worker-2")
	e.waitAll(ms, 2*time.Minute, "pending", pending)
	ctx := context.Background()
	for _, m := range ms {
		resp, err := e.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: e.cfg.Temporal.Namespace,
			Query: fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(m.OrderID))})
		if err != nil || len(resp.GetExecutions()) != 1 {
			t.Fatalf("order %s: %d sagas (%v)", m.OrderID, len(resp.GetExecutions()), err)
		}
	}
	var rows int64
	e.st.DB().Model(&store.Order{}).Where("item_id = ?", e.item.ID).Count(&rows)
	state, err := e.st.ReadItemState(ctx, e.item.ID)
	if err != nil || rows != n || state.Stock.Stock != units-n {
		t.Fatalf("%d rows, stock row %+v (%v); want %d rows and %d left", rows, state.Stock, err, n, units-n)
	}
}

// Temporal is stopped for 30 s while order messages arrive: the consumer does
// not acknowledge them, RocketMQ redelivers them, and every order completes
// once Temporal is back.
func TestSagaTemporalOutage(t *testing.T) {
	requireEnabled(t)
	const units, n = 30, 20
	e := newSagaEnv(t, units, 10*time.Second)
	e.startWorker("worker")
	probe := e.buy(1)
	e.waitAll([]order.Message{probe}, time.Minute, "pending", pending)

	run := e.stack
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			run("start", "temporal")
		}
	})
	run("stop", "temporal")
	stoppedAt := time.Now()
	var ms []order.Message
	for i := range n {
		ms = append(ms, e.buy(int64(100+i)))
		time.Sleep(time.Second)
	}
	time.Sleep(time.Until(stoppedAt.Add(30 * time.Second)))
	// Checked while Temporal is still down: once it answers, a redelivered
	// message can start its saga at any moment.
	for _, m := range ms {
		if s := e.status(m.OrderID); s != "" {
			t.Fatalf("order %s is %s although Temporal was down", m.OrderID, s)
		}
	}
	run("start", "temporal")
	restarted = true
	t.Logf("temporal back after %s", time.Since(stoppedAt).Round(time.Second))
	ms = append(ms, probe)
	// Redelivery backs off 10 s, 30 s, 1 min, 2 min...: allow a few rounds.
	e.waitAll(ms, 4*time.Minute, "pending", pending)
	t.Logf("all %d orders pending %s after Temporal came back", len(ms), time.Since(stoppedAt.Add(30*time.Second)).Round(time.Second))
	for i, m := range ms {
		if i%2 == 0 {
			e.pay(m)
		}
	}
	e.waitAll(ms, 2*time.Minute, "PAID or CANCELLED", final)
	e.checkUnits(ms, units)
}

// An outage of MariaDB or Redis (60 s, twice localBudget) in the middle of a 500-unit
// sale delays orders and never fails them: sagas in flight keep retrying
// (locally, then as regular activities), new messages keep arriving, and once
// the service is back every order reaches PENDING_PAYMENT and then PAID or
// CANCELLED, with 0 FAILED, 0 lost and the invariant checker clean.
func TestSagaMySQLOutage(t *testing.T) { outageSale(t, "mariadb", 60*time.Second) }

func TestSagaRedisOutage(t *testing.T) { outageSale(t, "redis", 60*time.Second) }

func outageSale(t *testing.T, service string, down time.Duration) {
	requireEnabled(t)
	const units = 500
	e := newSagaEnv(t, units, 20*time.Second)
	e.startWorker("worker")
	var ms []order.Message
	buy := func(from, to int) {
		for i := from; i < to; i++ {
			ms = append(ms, e.buy(int64(1000+i)))
		}
	}
	buy(0, 200)
	// Stop the service once sagas are in flight: some orders persisted,
	// others not yet.
	deadline := time.Now().Add(time.Minute)
	for e.status(ms[len(ms)/4].OrderID) == "" && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			e.stack("start", service)
		}
	})
	e.stack("stop", service)
	stoppedAt := time.Now()
	if service != "redis" { // reservations need Redis; with MySQL down the sale goes on
		buy(200, units)
	}
	time.Sleep(time.Until(stoppedAt.Add(down)))
	e.stack("start", service)
	restarted = true
	t.Logf("%s back after %s", service, time.Since(stoppedAt).Round(time.Second))
	if service == "redis" {
		buy(200, units)
	}
	e.waitAll(ms, 5*time.Minute, "pending", pending)
	t.Logf("all %d orders pending or final %s after %s came back", len(ms), time.Since(stoppedAt.Add(down)).Round(time.Second), service)
	for i, m := range ms {
		if i%2 == 0 && e.status(m.OrderID) == order.StatusPendingPayment {
			e.pay(m)
		}
	}
	deadline = time.Now().Add(3 * time.Minute)
	for {
		var open, failed int
		for _, m := range ms {
			switch e.status(m.OrderID) {
			case order.StatusPaid, order.StatusCancelled:
			case order.StatusFailed:
				failed++
			default:
				open++
			}
		}
		if failed > 0 {
			t.Fatalf("%d orders FAILED after a %s outage", failed, service)
		}
		if open == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d orders still open 3 min after the pays", open)
		}
		time.Sleep(500 * time.Millisecond)
	}
	rep := e.invariants(ms, true)
	t.Logf("orders by status: %v", rep.OrdersByStatus)
	if !rep.OK() {
		t.Fatalf("invariant violations after a %s outage: %v", service, rep.Violations)
	}
}
