package worker_test

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/testkit"
)

// Paid at the 202, and the order's message lost before any consumer saw it
// (its outbox entry gone, nothing on the topic): no saga will ever start, and
// the door's QUEUED row says "PAID, settling". The reconciler repairs it as a
// lost handoff: it starts the saga from the reservation, PersistOrder adopts
// the door's row, and the order ends PAID with its stock-row unit.
func TestPaidAtThe202MessageLostSettlesByReconcile(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(3, 15*time.Minute)
	m := p.reserveEarly(it.ID, 1401, time.Now(), 15*time.Minute)
	if v, err := p.pay(m); err != nil || v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("pay at the 202: %+v %v", v, err)
	}
	// The message is lost: the outbox entry goes, nothing is published.
	if err := p.rdb.Del(ctx, p.stk.ItemKeys(it.ID).Outbox).Err(); err != nil {
		t.Fatal(err)
	}

	lister := snapshot.TemporalLister{Client: p.tc, Namespace: p.cfg.Temporal.Namespace}
	r := reconcile.New(reconcile.Deps{MySQL: p.st, Units: p.stk, Outbox: outbox.New(p.rdb, p.cfg.Redis.KeyPrefix),
		Sagas: p.orders, Workflows: lister}, 0, p.log)
	var rep reconcile.Report
	for attempt := 0; ; attempt++ { // a busy dev server answers visibility queries with transient errors
		var err error
		if rep, err = r.Run(ctx, []int64{it.ID}, true); err == nil {
			break
		}
		if attempt == 5 {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	repaired := false
	for _, f := range rep.Findings {
		repaired = repaired || f.Kind == reconcile.LostHandoff && f.OrderID == m.OrderID && f.Repaired
		if f.Kind == reconcile.StuckQueued {
			t.Errorf("the lost handoff also reported as %s: %+v", f.Kind, f)
		}
	}
	if !repaired {
		t.Fatalf("the door's QUEUED row without a saga not repaired as %s: %+v", reconcile.LostHandoff, rep.Findings)
	}

	row := p.waitStatus(m.OrderID, order.StatusPaid, 30*time.Second)
	if row.PaidAt == nil || row.PayBy == nil || !row.PayBy.Equal(*m.PayBy) {
		t.Fatalf("row %+v", row)
	}
	if st := p.waitWorkflowClosed(m.OrderID, 30*time.Second); st != enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED {
		t.Fatalf("saga %s", st)
	}
	if d, ok, err := testkit.Deduction(ctx, p.st, m.OrderID); !ok || err != nil || d.Restored {
		t.Fatalf("deduction %+v %v %v", d, ok, err)
	}
	p.wantStock(it.ID, 2)
	p.wantLeft(it.ID, 2)
	if _, held, err := p.stk.Reservation(ctx, it.ID, m.OrderID); !held || err != nil {
		t.Fatalf("the paid order's reservation: held %v, %v", held, err)
	}
}
