package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

// message -> PENDING_PAYMENT -> pay -> PAID, with the stock row decremented once.
func TestSagaPaid(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(3, 15*time.Minute)
	m := p.buy(it.ID, 1001)

	p.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
	if s := p.stockRow(it.ID); s.Stock != 2 || s.Version != 1 {
		t.Fatalf("stock row %+v, want stock 2 version 1", s)
	}
	if d, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); !ok || err != nil || d.Restored {
		t.Fatalf("deduction %+v %v", d, err)
	}
	p.waitView(m.OrderID, order.StatusPendingPayment, 10*time.Second) // published after the row is written
	res, err := p.tc.QueryWorkflow(ctx, workflows.WorkflowID(m.OrderID), "", workflows.QueryStatus)
	var qv order.View
	if err == nil {
		err = res.Get(&qv)
	}
	if err != nil || qv.Status != order.StatusPendingPayment {
		t.Fatalf("status query %+v %v", qv, err)
	}

	v, err := p.pay(m)
	if err != nil || v.Status != order.StatusPaid {
		t.Fatalf("pay: %+v %v", v, err)
	}
	p.waitStatus(m.OrderID, order.StatusPaid, 10*time.Second)
	p.waitView(m.OrderID, order.StatusPaid, 10*time.Second)
	if st := p.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	p.assertLean(m.OrderID)
	// Paying again is answered with the PAID order; cancelling is refused.
	if v, err := p.pay(m); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("second pay: %+v %v", v, err)
	}
	_, err = p.cancel(m)
	mustNotPayable(t, err)
	p.wantStock(it.ID, 2)
	if _, ok, _ := p.stk.Reservation(ctx, it.ID, m.OrderID); !ok {
		t.Fatal("a paid order's reservation was released")
	}
	if _, err := p.pay(order.Message{OrderID: order.NewID(), UserID: m.UserID}); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("pay unknown order: %v, want ErrNotFound", err)
	}
	p.saveHistory(m.OrderID, "paid")
}

// No payment within a 5 s window (+ the grace) -> CANCELLED, both stocks
// back, and another buyer buys the unit; the first buyer keeps the mark.
func TestSagaPaymentTimeout(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it, a := p.pending(1, 5*time.Second, 2001)
	p.wantStock(it.ID, 0)
	if _, err := p.reserve(it.ID, 2002); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("second buyer while the unit is held: %v, want sold out", err)
	}

	row := p.waitStatus(a.OrderID, order.StatusCancelled, 45*time.Second)
	if row.Reason != order.ReasonPaymentTimeout {
		t.Fatalf("reason %q", row.Reason)
	}
	p.waitWorkflowClosed(a.OrderID, 10*time.Second)
	p.assertLean(a.OrderID)
	p.wantStock(it.ID, 1)
	if d, ok, err := testkit.Deduction(ctx, p.st, a.OrderID); !ok || err != nil || !d.Restored {
		t.Fatalf("deduction %+v %v, want restored", d, err)
	}
	p.wantLeft(it.ID, 1)
	p.wantPublished(a.OrderID, order.StatusCancelled)
	_, err := p.pay(a)
	mustNotPayable(t, err)
	var already *stock.AlreadyReservedError
	if _, err := p.reserve(it.ID, 2001); !errors.As(err, &already) {
		t.Fatalf("first buyer again: %v, want already reserved", err)
	}

	b := p.buy(it.ID, 2002)
	p.waitStatus(b.OrderID, order.StatusPendingPayment, 30*time.Second)
	p.wantStock(it.ID, 0)
	if v, err := p.pay(b); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("second buyer pays: %+v %v", v, err)
	}
	p.saveHistory(a.OrderID, "payment_timeout")
}

func TestSagaBuyerCancel(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	it, m := p.pending(2, 15*time.Minute, 3001)

	v, err := p.cancel(m)
	if err != nil || v.Status != order.StatusCancelled || v.Reason != order.ReasonBuyerCancelled {
		t.Fatalf("cancel: %+v %v", v, err)
	}
	// The cancel is answered at the door; the woken saga gives the units back.
	if st := p.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	p.assertLean(m.OrderID)
	if s := p.stockRow(it.ID); s.Stock != 2 || s.Version != 2 {
		t.Fatalf("stock row %+v, want stock 2 version 2", s)
	}
	p.wantLeft(it.ID, 2)
	p.wantPublished(m.OrderID, order.StatusCancelled)
	_, err = p.pay(m)
	mustNotPayable(t, err)
	_, err = p.cancel(m)
	mustNotPayable(t, err)
	p.saveHistory(m.OrderID, "buyer_cancel")
}

// The same message delivered twice (and a third start by hand) -> one saga,
// one order row, one decrement.
func TestSagaDuplicateMessage(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(5, 15*time.Minute)
	m := p.buy(it.ID, 4001)
	if err := p.producer.PublishOrder(ctx, m); err != nil {
		t.Fatal(err)
	}
	p.waitStatus(m.OrderID, order.StatusPendingPayment, 30*time.Second)
	if err := p.orders.Start(ctx, m); err != nil {
		t.Fatalf("start again: %v, want success", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for counter(p.metrics.SagaStarts) < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := counter(p.metrics.SagaStarts); n != 2 {
		t.Fatalf("consumer handled %v deliveries, want 2", n)
	}
	resp, err := p.tc.ListWorkflow(ctx, listRequest(p, m.OrderID))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetExecutions()); n > 1 {
		t.Fatalf("%d sagas for one order", n)
	}
	if n := p.countOrders(it.ID); n != 1 {
		t.Fatalf("%d order rows, want 1", n)
	}
	p.wantStock(it.ID, 4)
	// After the saga closed, a redelivery still makes no second run (REJECT_DUPLICATE).
	if _, err := p.cancel(m); err != nil {
		t.Fatal(err)
	}
	p.waitWorkflowClosed(m.OrderID, 10*time.Second)
	if err := p.orders.Start(ctx, m); err != nil {
		t.Fatalf("start after close: %v", err)
	}
	d, err := p.tc.DescribeWorkflow(ctx, workflows.WorkflowID(m.OrderID), "")
	if err != nil {
		t.Fatal(err)
	}
	if st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("a closed order's saga ran again: %v", st)
	}
}

// A held consumer starts no saga and loses no message: while held, the
// orders stay unknown to MySQL and Temporal; once released, every one of
// them reaches PENDING_PAYMENT exactly once. The check while held comes once
// every consumer goroutine holds a delivery at the gate: a gate that let
// them through would have started sagas by then.
func TestHeldConsumerStartsNothingUntilReleased(t *testing.T) {
	t.Parallel()
	gate := worker.NewGate()
	gate.Set(true)
	p := newPipeline(t, pipelineOptions{gate: gate})
	it := p.item(20, 15*time.Minute)
	var ms []order.Message
	for u := int64(0); u < 12; u++ {
		ms = append(ms, p.buy(it.ID, 7001+u))
	}
	deadline := time.Now().Add(60 * time.Second)
	for p.arrived.Load() < consumeGoroutines && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := p.arrived.Load(); n < consumeGoroutines {
		t.Fatalf("%d deliveries reached the gate, want %d (every consumer goroutine)", n, consumeGoroutines)
	}
	if n := counter(p.metrics.SagaStarts); n != 0 {
		t.Fatalf("%v sagas started while held, want 0", n)
	}
	if n := p.countOrders(it.ID); n != 0 {
		t.Fatalf("%d orders persisted while held, want 0", n)
	}
	gate.Set(false)
	for _, m := range ms {
		p.waitStatus(m.OrderID, order.StatusPendingPayment, 60*time.Second)
	}
	if n := p.countOrders(it.ID); n != int64(len(ms)) {
		t.Fatalf("%d orders after release, want %d", n, len(ms))
	}
	want := 20 - int64(len(ms))
	deadline = time.Now().Add(30 * time.Second)
	s := p.stockRow(it.ID)
	for s.Stock != want && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		s = p.stockRow(it.ID)
	}
	if s.Stock != want {
		t.Fatalf("stock row %+v, want %d", s, want)
	}
}

// Redis reserved the unit but the stock row is at zero (Redis held a unit
// MySQL never had): a permanent failure, compensated at once (no retry
// loop), the order FAILED with the typed reason, and the phantom unit retired
// rather than put back on sale, where it would fail the next buyer the same way.
func TestSagaStockExhausted(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(1, 15*time.Minute)
	if err := p.st.DB().Exec("UPDATE stock SET stock = 0 WHERE item_id = ?", it.ID).Error; err != nil {
		t.Fatal(err)
	}
	m := p.buy(it.ID, 5001)
	row := p.waitStatus(m.OrderID, order.StatusFailed, 30*time.Second)
	if !strings.HasPrefix(row.Reason, order.ReasonStockExhausted) {
		t.Fatalf("reason %q", row.Reason)
	}
	if st := p.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Fatalf("saga %s, want FAILED", st)
	}
	p.assertLean(m.OrderID)
	if _, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); ok || err != nil {
		t.Fatalf("deduction: %v, want none", err)
	}
	p.wantLeft(it.ID, 0)
	if _, ok, _ := p.stk.Reservation(ctx, it.ID, m.OrderID); ok {
		t.Fatal("reservation still held")
	}
	if n := counter(p.metrics.PhantomUnits); n != 1 {
		t.Fatalf("phantom units metric %v, want 1", n)
	}
	p.wantPublished(m.OrderID, order.StatusFailed)
	p.saveHistory(m.OrderID, "stock_exhausted")
}

// failingStarter stands for a Temporal that never takes the start.
type failingStarter struct{ calls atomic.Int64 }

func (f *failingStarter) Start(context.Context, order.Message) error {
	f.calls.Add(1)
	return errors.New("temporal unreachable (test)")
}

// A message whose saga could not be started within the consumer's
// redelivery budget ends in the dead-letter topic; the dead-letter consumer
// starts the saga after all (an outage never fails an order), and a second
// dead letter of the same order changes nothing.
func TestSagaDeadLetterRedrives(t *testing.T) {
	t.Parallel()
	fs := &failingStarter{}
	p := newPipeline(t, pipelineOptions{starter: fs, maxReconsume: 1, deadLetters: true})
	ctx := context.Background()
	it := p.item(1, 15*time.Minute)
	m := p.buy(it.ID, 6001)
	// First delivery, one redelivery ~10 s later, then the dead-letter topic.
	p.waitStatus(m.OrderID, order.StatusPendingPayment, 90*time.Second)
	if fs.calls.Load() < 2 {
		t.Fatalf("start tried %d times, want >= 2", fs.calls.Load())
	}
	if n := counter(p.metrics.DeadLetters.WithLabelValues(worker.DeadLetterStarted)); n != 1 {
		t.Fatalf("dead-letter metric %v, want 1", n)
	}
	h := worker.Handler(worker.DeadLetters, p.orders, p.signer, p.metrics, p.log, 10*time.Second)
	again := &primitive.MessageExt{Message: primitive.Message{Body: m.Encode()}}
	p.signer.SignMessage(&again.Message)
	if err := h(ctx, again); err != nil {
		t.Fatal(err)
	}
	resp, err := p.tc.ListWorkflow(ctx, listRequest(p, m.OrderID))
	if err != nil || len(resp.GetExecutions()) != 1 {
		t.Fatalf("%d sagas for one order (%v)", len(resp.GetExecutions()), err)
	}
	if v, err := p.pay(m); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("pay: %+v %v", v, err)
	}
	p.wantStock(it.ID, 0)
}

// The buyer already holds another order for the item in MySQL (Redis lost
// its mark): PersistOrder fails for good, the unit is released, and the
// FAILED status is published although no row can hold this order.
func TestSagaDuplicateBuyer(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(3, 15*time.Minute)
	if _, err := p.st.CreateQueuedOrder(ctx, store.Order{OrderID: order.NewID(), UserID: 8001, ItemID: it.ID}); err != nil {
		t.Fatal(err)
	}
	m := p.buy(it.ID, 8001)
	if st := p.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Fatalf("saga %s, want FAILED", st)
	}
	if v, _, _ := p.views.Status(ctx, m.OrderID); v.Status != order.StatusFailed || !strings.HasPrefix(v.Reason, "DUPLICATE_ORDER") {
		t.Fatalf("published status %+v", v)
	}
	p.wantLeft(it.ID, 3)
	p.wantStock(it.ID, 3)
	p.saveHistory(m.OrderID, "duplicate_buyer")
}

// Support cancels the workflow itself: the saga still compensates.
func TestSagaOperatorCancel(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it, m := p.pending(1, 15*time.Minute, 9001)
	if err := p.tc.CancelWorkflow(ctx, workflows.WorkflowID(m.OrderID), ""); err != nil {
		t.Fatal(err)
	}
	row := p.waitStatus(m.OrderID, order.StatusCancelled, 30*time.Second)
	if row.Reason != order.ReasonOperatorCancelled {
		t.Fatalf("reason %q", row.Reason)
	}
	if st := p.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Fatalf("saga %s, want CANCELED", st)
	}
	p.wantStock(it.ID, 1)
	p.wantLeft(it.ID, 1)
	p.saveHistory(m.OrderID, "operator_cancel")
}

// The broker creates a group's dead-letter topic lazily and write-only (perm
// 2). StartDeadLetterConsumer must make an existing one readable, or dead
// letters written before the worker's first start would sit there forever.
func TestDeadLetterTopicMadeReadable(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{noWorker: true, starter: &failingStarter{}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	topic := worker.DeadLetterTopic(p.cfg.RocketMQ.ConsumerGroup)
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(p.cfg.RocketMQ.NameServers)))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a.Close() }()
	if err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(p.cfg.RocketMQ.Brokers[0]),
		admin.WithReadQueueNums(1), admin.WithWriteQueueNums(1), admin.WithPerm(2)); err != nil {
		t.Fatal(err)
	}
	it := p.item(1, time.Minute)
	m, err := p.reserve(it.ID, 9901)
	if err != nil {
		t.Fatal(err)
	}
	// A dead letter already waiting before the handler starts.
	if err := p.producer.Send(ctx, topic, m.OrderID, m.Encode()); err != nil {
		t.Fatal(err)
	}
	d, err := worker.StartDeadLetterConsumer(ctx, p.cfg.RocketMQ, testkit.Name(t, "dlq"), p.log,
		worker.Handler(worker.DeadLetters, p.orders, p.signer, p.metrics, p.log, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Close() }()
	deadline := time.Now().Add(45 * time.Second)
	for counter(p.metrics.DeadLetters.WithLabelValues(worker.DeadLetterStarted)) < 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.tc.DescribeWorkflow(ctx, workflows.WorkflowID(m.OrderID), ""); err != nil {
		t.Fatalf("the waiting dead letter started no saga: %v", err)
	}
}
