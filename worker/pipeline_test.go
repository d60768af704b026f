package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/activities"
	"github.com/seckill/seckill/compensation"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

// pipeline is one isolated slice of the real stack: its own database, Redis
// prefix, topic, consumer group and task queue, with the consumer and the
// saga worker of this package running in-process.
type pipeline struct {
	t        *testing.T
	slice    *testkit.Slice
	cfg      config.Config
	st       *store.Store
	stk      *stock.Store
	rdb      redis.UniversalClient
	views    *orderstatus.Board
	tc       client.Client
	orders   *workflows.Client
	desk     *payment.Desk
	producer *queue.Producer
	signer   *queue.Signer // the API's signature of order messages (what the producer signs with)
	metrics  *worker.Metrics
	payments *compensation.Payments
	log      *slog.Logger
	arrived  atomic.Int64 // deliveries handed to the consumer's handler, before any gate
}

// consumeGoroutines is how many deliveries the order consumer handles at once.
const consumeGoroutines = 8

type pipelineOptions struct {
	starter      worker.Starter // nil: the real workflows.Client
	maxReconsume int32
	deadLetters  bool // run the dead-letter consumer too
	noWorker     bool
	gate         *worker.Gate           // nil: the consumer is never held
	pay          *compensation.Payments // payments through a provider: the saga cancels and refunds through it
}

func newPipeline(t *testing.T, o pipelineOptions) *pipeline {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := &pipeline{t: t, metrics: worker.NewMetrics(nil),
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	var err error
	s := testkit.NewSlice(ctx, t)
	p.slice = s
	p.cfg, p.st, p.stk, p.rdb = s.Config, s.Store, s.Stock, s.Redis
	p.views = orderstatus.New(s.Redis, p.cfg.Redis.KeyPrefix)
	if o.maxReconsume > 0 {
		p.cfg.RocketMQ.MaxReconsume = o.maxReconsume
	}
	p.tc = s.Temporal(ctx, t, p.log)
	p.signer = queue.NewSigner(p.cfg.RocketMQ)
	// As `seckill worker` does: eager start when the worker runs here.
	p.orders = workflows.NewClient(p.tc, p.cfg.Temporal.TaskQueue).WithEagerStart(p.cfg.Worker.EagerStart && !o.noWorker).
		WithPayments(o.pay != nil)
	p.payments = o.pay
	p.desk = testkit.Desk(t, p.st, p.views, p.stk, p.orders, p.log)
	if !o.noWorker {
		p.startWorker()
	}
	starter := o.starter
	if starter == nil {
		starter = p.orders
	}
	var c *queue.Consumer
	for i := 0; ; i++ { // a fresh topic's route reaches the name server with the next broker registration
		h := worker.Handler(worker.Orders, starter, p.signer, p.metrics, p.log, 10*time.Second)
		if o.gate != nil {
			h = o.gate.Handler(h)
		}
		gated := h
		h = func(ctx context.Context, m *primitive.MessageExt) error { p.arrived.Add(1); return gated(ctx, m) }
		c, err = worker.StartOrderConsumer(p.cfg.RocketMQ, consumeGoroutines, p.log, h)
		if err == nil || i == 20 {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if o.deadLetters {
		d, err := worker.StartDeadLetterConsumer(ctx, p.cfg.RocketMQ, testkit.Name(t, "dlq"), p.log,
			worker.Handler(worker.DeadLetters, p.orders, p.signer, p.metrics, p.log, 10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
	}
	p.producer, err = queue.NewProducer(p.cfg.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.producer.Close() })
	return p
}

func (p *pipeline) startWorker() {
	comp := compensation.New(p.st, p.stk, p.metrics.PhantomUnits, p.metrics.Refunds)
	if p.payments != nil {
		pay := *p.payments
		pay.Store, pay.Failures = p.st, p.metrics.RefundFailures
		comp = compensation.WithPayments(comp, pay)
	}
	w := worker.NewTemporalWorker(p.tc, p.cfg.Temporal.TaskQueue, p.cfg.Worker, activities.New(p.st, p.views, p.metrics.Payable), comp)
	if err := w.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(w.Stop)
}

// item creates an item with units in MySQL and Redis.
func (p *pipeline) item(units int64, paymentWindow time.Duration) store.Item {
	p.t.Helper()
	ctx := context.Background()
	it, err := p.st.CreateItem(ctx, store.Item{Name: "test item", PriceCents: 100, StockTotal: units,
		StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: int(paymentWindow / time.Second)})
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.stk.Load(ctx, it.ID, units); err != nil {
		p.t.Fatal(err)
	}
	return it
}

// reserve takes a unit in Redis as the API does (the deadline from the
// item's payment window in the reservation and the message); it does not
// publish.
func (p *pipeline) reserve(itemID, userID int64) (order.Message, error) {
	ctx := context.Background()
	it, err := p.st.GetItem(ctx, itemID)
	if err != nil {
		return order.Message{}, err
	}
	now := time.Now()
	payBy := order.Deadline(now, it.PaymentTimeoutSeconds)
	m := order.Message{OrderID: order.NewID(), ItemID: itemID, UserID: userID, ReservedAt: now.UTC(), PayBy: &payBy}
	_, err = p.stk.Reserve(ctx, m)
	return m, err
}

// buy reserves and publishes the order message, as the API and its relay do.
func (p *pipeline) buy(itemID, userID int64) order.Message {
	p.t.Helper()
	m, err := p.reserve(itemID, userID)
	if err != nil {
		p.t.Fatal(err)
	}
	if err := p.producer.PublishOrder(context.Background(), m); err != nil {
		p.t.Fatal(err)
	}
	return m
}

// pending puts an item of units on sale, buys one as userID and waits
// until that order is PENDING_PAYMENT.
func (p *pipeline) pending(units int64, paymentWindow time.Duration, userID int64) (store.Item, order.Message) {
	p.t.Helper()
	it := p.item(units, paymentWindow)
	m := p.buy(it.ID, userID)
	p.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
	return it, m
}

// waitStatus waits until the order's row has the status.
func (p *pipeline) waitStatus(orderID string, want order.Status, within time.Duration) store.Order {
	p.t.Helper()
	var last store.Order
	var lastErr error
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		last, lastErr = p.st.FindOrder(context.Background(), orderID)
		if lastErr == nil && last.Status == want {
			return last
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("order %s: status %q (err %v) after %s, want %s", orderID, last.Status, lastErr, within, want)
	return last
}

// waitView waits until the status the saga publishes for the API (its Notify
// step, after the row is written) is want.
func (p *pipeline) waitView(orderID string, want order.Status, within time.Duration) order.View {
	p.t.Helper()
	var last order.View
	var ok bool
	var err error
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last, ok, err = p.views.Status(context.Background(), orderID); err == nil && ok && last.Status == want {
			return last
		}
	}
	p.t.Fatalf("order %s: published status %+v (found %v, err %v) after %s, want %s", orderID, last, ok, err, within, want)
	return last
}

func (p *pipeline) stockRow(itemID int64) store.Stock {
	p.t.Helper()
	s, err := p.st.ReadItemState(context.Background(), itemID)
	if err != nil {
		p.t.Fatal(err)
	}
	return s.Stock
}

// wantStock fails the test unless the item's stock row holds want units.
func (p *pipeline) wantStock(itemID, want int64) {
	p.t.Helper()
	if s := p.stockRow(itemID); s.Stock != want {
		p.t.Fatalf("stock row %+v, want %d", s, want)
	}
}

// redisLeft is the item's units left in Redis.
func (p *pipeline) redisLeft(itemID int64) int64 {
	p.t.Helper()
	n, err := p.stk.Left(context.Background(), itemID)
	if err != nil {
		p.t.Fatal(err)
	}
	return n
}

// wantLeft fails the test unless Redis holds want units of the item.
func (p *pipeline) wantLeft(itemID, want int64) {
	p.t.Helper()
	if n := p.redisLeft(itemID); n != want {
		p.t.Fatalf("redis stock_left %d, want %d", n, want)
	}
}

// wantPublished fails the test unless the order's published status is want.
func (p *pipeline) wantPublished(orderID string, want order.Status) {
	p.t.Helper()
	if v, _, _ := p.views.Status(context.Background(), orderID); v.Status != want {
		p.t.Fatalf("published status %+v, want %s", v, want)
	}
}

func (p *pipeline) countOrders(itemID int64) int64 {
	p.t.Helper()
	var n int64
	if err := p.st.DB().Model(&store.Order{}).Where("item_id = ?", itemID).Count(&n).Error; err != nil {
		p.t.Fatal(err)
	}
	return n
}

// waitWorkflowClosed waits until the order's saga has closed and returns its status.
func (p *pipeline) waitWorkflowClosed(orderID string, within time.Duration) enumspb.WorkflowExecutionStatus {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		d, err := p.tc.DescribeWorkflow(context.Background(), workflows.WorkflowID(orderID), "")
		if err == nil && d.RawResponse.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("saga of order %s still running or missing after %s (err %v)", orderID, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// saveHistory writes the saga's history to workflows/testdata/<name>.json
// when SECKILL_RECORD_HISTORIES=1, for the replay test.
func (p *pipeline) saveHistory(orderID, name string) {
	p.t.Helper()
	if os.Getenv("SECKILL_RECORD_HISTORIES") != "1" {
		return
	}
	p.waitWorkflowClosed(orderID, time.Minute)
	p.saveWorkflowHistory(workflows.WorkflowID(orderID), name)
}

// saveWorkflowHistory is saveHistory of a closed workflow by its id.
func (p *pipeline) saveWorkflowHistory(workflowID, name string) {
	p.t.Helper()
	if os.Getenv("SECKILL_RECORD_HISTORIES") != "1" {
		return
	}
	ctx := context.Background()
	it := p.tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			p.t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		p.t.Fatal(err)
	}
	path := filepath.Join("..", "workflows", "testdata", name+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("history of %s saved to %s (%d events)", workflowID, path, len(h.Events))
}

// pay is the buyer's pay as the API takes it: judged at the door, now.
func (p *pipeline) pay(m order.Message) (order.View, error) {
	return p.desk.Pay(context.Background(), m.OrderID, m.UserID, time.Now())
}

// cancel is the buyer's cancel as the API takes it.
func (p *pipeline) cancel(m order.Message) (order.View, error) {
	return p.desk.Cancel(context.Background(), m.OrderID, m.UserID, time.Now())
}

// Budget of a healthy order's saga on the server (the saga issue): every
// path within 20 history events and 3 workflow tasks, no task timeouts.
const (
	maxEvents        = 20
	maxWorkflowTasks = 3
)

// assertLean reads the closed saga's history from the server and checks it
// against the budget; it returns the events and workflow tasks counted.
func (p *pipeline) assertLean(orderID string) (events, tasks int) {
	p.t.Helper()
	p.waitWorkflowClosed(orderID, time.Minute)
	it := p.tc.GetWorkflowHistory(context.Background(), workflows.WorkflowID(orderID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var kinds []string
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			p.t.Fatal(err)
		}
		events++
		kinds = append(kinds, ev.GetEventType().String())
		switch ev.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			tasks++
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			p.t.Errorf("order %s: workflow task timed out", orderID)
		}
	}
	if events > maxEvents || tasks > maxWorkflowTasks {
		p.t.Errorf("order %s: %d events, %d workflow tasks; budget %d and %d: %v", orderID, events, tasks, maxEvents, maxWorkflowTasks, kinds)
	}
	p.t.Logf("order %s: %d history events, %d workflow tasks", orderID, events, tasks)
	return events, tasks
}

func mustNotPayable(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("err %v, want order.ErrNotPayable", err)
	}
}

func listRequest(p *pipeline, orderID string) *workflowservice.ListWorkflowExecutionsRequest {
	return &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: p.cfg.Temporal.Namespace,
		Query:     fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(orderID)),
	}
}

// counter reads a counter's value.
func counter(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
