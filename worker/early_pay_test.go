package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/testkit"
)

// reserveEarly takes a unit as the API does (the deadline in the
// reservation, the QUEUED view naming the item) with reservedAt and window
// of the test's choosing, without publishing: the test decides when the
// saga may run.
func (p *pipeline) reserveEarly(itemID, userID int64, reservedAt time.Time, window time.Duration) order.Message {
	p.t.Helper()
	payBy := order.Deadline(reservedAt, int(window/time.Second))
	m := order.Message{OrderID: order.NewID(), ItemID: itemID, UserID: userID, ReservedAt: reservedAt.UTC(), PayBy: &payBy}
	if _, err := p.stk.Reserve(context.Background(), m); err != nil {
		p.t.Fatal(err)
	}
	return m
}

func (p *pipeline) publish(m order.Message) {
	p.t.Helper()
	if err := p.producer.PublishOrder(context.Background(), m); err != nil {
		p.t.Fatal(err)
	}
}

// Paid at the door before its saga ran: the buyer is answered PAID at once,
// a forged order id writes nothing, and the saga, when it runs, takes the
// unit and settles the order PAID in its first workflow task, with no wake.
func TestSagaPaidWhileQueued(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(3, 15*time.Minute)
	m := p.reserveEarly(it.ID, 1101, time.Now(), 15*time.Minute)

	forged := m
	forged.OrderID = order.NewID()
	if _, err := p.pay(forged); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("pay of a forged order id: %v, want not found", err)
	}
	if _, err := p.st.FindOrder(ctx, forged.OrderID); !errors.Is(err, order.ErrNotFound) {
		t.Fatalf("row of a forged order id: %v", err)
	}
	v, err := p.pay(m)
	if err != nil || v.Status != order.StatusPaid || !v.Settling || v.PayBy == nil || !v.PayBy.Equal(*m.PayBy) {
		t.Fatalf("pay while QUEUED: %+v %v", v, err)
	}
	if v, _, _ := p.views.Status(ctx, m.OrderID); v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("published view %+v", v)
	}
	if _, err := p.cancel(m); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("cancel of a paid order: %v", err)
	}

	p.publish(m)
	row := p.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	if row.PaidAt == nil || row.PayBy == nil || !row.PayBy.Equal(*m.PayBy) {
		t.Fatalf("row %+v", row)
	}
	if st := p.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	if _, tasks := p.assertLean(m.OrderID); tasks != 1 {
		t.Fatalf("%d workflow tasks, want 1 (no wake)", tasks)
	}
	if d, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); !ok || err != nil || d.Restored {
		t.Fatalf("deduction %+v %v", d, err)
	}
	p.wantStock(it.ID, 2)
	if v, _, _ := p.views.Status(ctx, m.OrderID); v.Status != order.StatusPaid || v.Settling {
		t.Fatalf("published view %+v, want PAID settled", v)
	}
	p.saveHistory(m.OrderID, "paid_while_queued")
}

// Paid while QUEUED, and the stock row has no unit for it (a phantom unit
// after a Redis failover): the order ends REFUNDED, never PAID without a
// unit; the view shows it, the metric counts it, the unit is retired.
func TestSagaPaidWhileQueuedPhantomUnitIsRefunded(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(1, 15*time.Minute)
	if err := p.st.DB().Exec("UPDATE stock SET stock = 0 WHERE item_id = ?", it.ID).Error; err != nil {
		t.Fatal(err)
	}
	m := p.reserveEarly(it.ID, 1201, time.Now(), 15*time.Minute)
	if v, err := p.pay(m); err != nil || v.Status != order.StatusPaid {
		t.Fatalf("pay while QUEUED: %+v %v", v, err)
	}
	p.publish(m)
	row := p.waitStatus(m.OrderID, order.StatusRefunded, 30*time.Second)
	if !strings.HasPrefix(row.Reason, order.ReasonStockExhausted) || row.PaidAt == nil {
		t.Fatalf("row %+v", row)
	}
	if st := p.waitWorkflowClosed(m.OrderID, 10*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_FAILED {
		t.Fatalf("saga %s, want FAILED", st)
	}
	p.assertLean(m.OrderID)
	p.wantPublished(m.OrderID, order.StatusRefunded)
	if n := counter(p.metrics.Refunds); n != 1 {
		t.Fatalf("refunds metric %v, want 1", n)
	}
	if _, ok, _ := p.stk.Reservation(ctx, it.ID, m.OrderID); ok || p.redisLeft(it.ID) != 0 {
		t.Fatal("the phantom unit is still held or back on sale")
	}
	if _, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); ok || err != nil {
		t.Fatalf("deduction: %v, want none", err)
	}
	p.saveHistory(m.OrderID, "refunded")
}

// An unpaid order whose window passed while it was QUEUED is closed as soon
// as its saga runs: no stock-row unit taken, its Redis unit back on sale.
// One cancelled while QUEUED gives its unit back the same way.
func TestSagaClosedWhileQueued(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(2, 15*time.Minute)
	late := p.reserveEarly(it.ID, 1301, time.Now().Add(-time.Minute), 5*time.Second) // pay_by + grace passed
	if _, err := p.pay(late); !errors.Is(err, order.ErrNotPayable) {
		t.Fatalf("pay after pay_by: %v", err)
	}
	cancelled := p.reserveEarly(it.ID, 1302, time.Now(), 15*time.Minute)
	if v, err := p.cancel(cancelled); err != nil || v.Status != order.StatusCancelled {
		t.Fatalf("cancel while QUEUED: %+v %v", v, err)
	}
	p.publish(late)
	p.publish(cancelled)
	if row := p.waitStatus(late.OrderID, order.StatusCancelled, 30*time.Second); row.Reason != order.ReasonPaymentTimeout {
		t.Fatalf("row %+v", row)
	}
	for _, m := range []order.Message{late, cancelled} {
		if st := p.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
			t.Fatalf("saga of %s: %s", m.OrderID, st)
		}
		p.assertLean(m.OrderID)
		if _, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); ok || err != nil {
			t.Fatalf("deduction of %s: %v, want none", m.OrderID, err)
		}
	}
	p.wantLeft(it.ID, 2)
	p.wantStock(it.ID, 2)
	p.saveHistory(late.OrderID, "timeout_while_queued")
	p.saveHistory(cancelled.OrderID, "cancel_while_queued")
}
