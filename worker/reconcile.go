package worker

import (
	"context"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/reconcile"
)

// Reconciler is the drift check the worker runs periodically (reconcile.Reconciler).
type Reconciler interface {
	ActiveItems(ctx context.Context, now time.Time, since time.Duration) ([]int64, error)
	Run(ctx context.Context, items []int64, repair bool) (reconcile.Report, error)
}

// RunReconcile checks the active items every cfg.Interval until ctx ends.
func RunReconcile(ctx context.Context, r Reconciler, cfg config.Reconcile, m *Metrics, log *slog.Logger) {
	if cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		items, err := r.ActiveItems(ctx, time.Now(), cfg.Since)
		if err != nil {
			log.Warn("reconcile: list items", "err", err)
			continue
		}
		rep, err := r.Run(ctx, items, cfg.Repair)
		if err != nil {
			log.Warn("reconcile", "err", err)
			continue
		}
		drift := map[string]float64{}
		for _, f := range rep.Findings {
			if f.Repaired {
				m.Repairs.WithLabelValues(f.Kind).Inc()
			} else {
				drift[f.Kind]++
			}
		}
		m.Drift.Reset()
		for _, kind := range reconcile.Kinds {
			m.Drift.WithLabelValues(kind).Set(drift[kind])
		}
		m.setBooks(rep.Books)
	}
}

// setBooks shows the books of the items just reconciled, and no others.
func (m *Metrics) setBooks(bs []books.Sale) {
	for _, g := range []*prometheus.GaugeVec{m.Captured, m.Refunded, m.RefundsPending, m.Stuck} {
		g.Reset()
	}
	for _, b := range bs {
		id := strconv.FormatInt(b.ItemID, 10)
		m.Stuck.WithLabelValues(id).Set(float64(b.Stuck))
		for _, x := range b.Money {
			m.Captured.WithLabelValues(id, x.Currency).Set(float64(x.Captured))
			m.Refunded.WithLabelValues(id, x.Currency).Set(float64(x.Refunded))
			m.RefundsPending.WithLabelValues(id, x.Currency).Set(float64(x.RefundsPending))
		}
	}
}
