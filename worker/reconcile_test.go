package worker_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/worker"
)

type fakeReconciler struct{ runs atomic.Int64 }

func (f *fakeReconciler) ActiveItems(context.Context, time.Time, time.Duration) ([]int64, error) {
	return []int64{7}, nil
}

func (f *fakeReconciler) Run(context.Context, []int64, bool) (reconcile.Report, error) {
	f.runs.Add(1)
	return reconcile.Report{Findings: []reconcile.Finding{
		{Kind: reconcile.RedisStock, ItemID: 7},
		{Kind: reconcile.LostHandoff, ItemID: 7, OrderID: "X", Repaired: true},
	}, Books: []books.Sale{{ItemID: 7, Stuck: 1, Money: []store.Money{{Currency: "EUR", Captured: 1998, Refunded: 999, RefundsPending: 999}}}}}, nil
}

// The worker's periodic reconcile runs every interval and exports the drift
// it leaves, the repairs it made and the books.
func TestPeriodicReconcileExportsDrift(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := worker.NewMetrics(nil)
		f := &fakeReconciler{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			worker.RunReconcile(ctx, f, config.Reconcile{Interval: time.Minute, Since: time.Hour}, m, slog.New(slog.NewTextHandler(io.Discard, nil)))
		}()
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		if f.runs.Load() != 1 {
			t.Fatalf("%d runs after one interval, want 1", f.runs.Load())
		}
		if v := testutil.ToFloat64(m.Drift.WithLabelValues(reconcile.RedisStock)); v != 1 {
			t.Fatalf("drift redis_stock %v, want 1", v)
		}
		if v := testutil.ToFloat64(m.Repairs.WithLabelValues(reconcile.LostHandoff)); v != 1 {
			t.Fatalf("repairs lost_handoff %v, want 1", v)
		}
		for g, want := range map[*prometheus.GaugeVec]float64{m.Captured: 1998, m.Refunded: 999, m.RefundsPending: 999} {
			if v := testutil.ToFloat64(g.WithLabelValues("7", "EUR")); v != want {
				t.Errorf("books gauge %v, want %v", v, want)
			}
		}
		if v := testutil.ToFloat64(m.Stuck.WithLabelValues("7")); v != 1 {
			t.Fatalf("refunds stuck %v, want 1", v)
		}
		cancel()
		<-done
	})
}
