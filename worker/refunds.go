package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/store"
)

// RefundStore is what the refund driver reads (store.Store).
type RefundStore interface {
	OwedRefunds(ctx context.Context, idle time.Duration, limit int) ([]store.OwedRefund, error)
	OwedSummary(ctx context.Context, grace time.Duration) (store.RefundsOwed, error)
}

// RefundStarter starts a payment's PaymentRefund (workflows.Client): a
// no-op while one runs, a new run after one closed.
type RefundStarter interface {
	StartRefund(ctx context.Context, orderID, paymentID, reason string) error
	StartSupportRefund(ctx context.Context, orderID, paymentID, reason string) error
}

var _ RefundStore = (*store.Store)(nil)

// RunRefunds is the driver of owed refunds no saga or workflow is working
// on: every cfg.Interval it starts the PaymentRefund of each refund row the
// provider has not confirmed and nobody touched for cfg.Idle (a refund
// workflow that could not start, or ended without refunding), whatever the
// age of its sale, and exports how many are owed and overdue. Only the
// refunds of provider (this worker's) are started.
func RunRefunds(ctx context.Context, st RefundStore, starter RefundStarter, provider string, cfg config.Refunds, m *Metrics, log *slog.Logger) {
	if cfg.Interval <= 0 {
		return
	}
	t := time.NewTicker(cfg.Interval)
	defer t.Stop()
	for {
		DriveRefunds(ctx, st, starter, provider, cfg, m, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DriveRefunds is one round of RunRefunds.
func DriveRefunds(ctx context.Context, st RefundStore, starter RefundStarter, provider string, cfg config.Refunds, m *Metrics, log *slog.Logger) {
	owed, err := st.OwedRefunds(ctx, cfg.Idle, cfg.Batch)
	if err != nil {
		log.Warn("refunds: read owed refunds", "err", err)
		return
	}
	for _, r := range owed {
		if r.Provider != provider {
			log.Error("refund owed through another provider than this worker's: a worker with it must run",
				"order_id", r.OrderID, "payment_id", r.ProviderPaymentID, "provider", r.Provider, "worker_provider", provider)
			continue
		}
		start, reason := starter.StartRefund, r.Reason
		if r.Support() {
			start = starter.StartSupportRefund
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := start(sctx, r.OrderID, r.ProviderPaymentID, reason)
		cancel()
		if err != nil {
			log.Warn("refunds: start refund", "order_id", r.OrderID, "payment_id", r.ProviderPaymentID, "err", err)
			continue
		}
		m.RefundDrives.Inc()
		log.Info("refunds: owed refund driven", "order_id", r.OrderID, "payment_id", r.ProviderPaymentID,
			"status", r.Status, "asked_by", r.AskedBy, "since", r.CreatedAt)
	}
	sum, err := st.OwedSummary(ctx, cfg.Grace)
	if err != nil {
		log.Warn("refunds: sum owed refunds", "err", err)
		return
	}
	m.RefundsOwed.Set(float64(sum.Owed))
	m.RefundsOverdue.Set(float64(sum.Overdue))
	m.RefundOldest.Set(sum.Oldest.Seconds())
}
