package store_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// BenchmarkPaymentDecisions compares, on real MySQL with 512 callers, the
// door's pay (RecordPayment) with a notification's decision alone
// (ApplyPaymentEvent) and group-committed (Batcher, as the API runs it):
// go test ./store -run '^$' -bench PaymentDecisions -benchtime 3000x
func BenchmarkPaymentDecisions(b *testing.B) {
	for _, name := range []string{"door", "notification", "notification-batched"} {
		b.Run(name, func(b *testing.B) {
			st, _ := testkit.MySQL(b)
			ctx := context.Background()
			it, err := st.CreateItem(ctx, store.Item{Name: "x", PriceCents: 100, Currency: "EUR", StockTotal: int64(b.N),
				StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 3600})
			if err != nil {
				b.Fatal(err)
			}
			payBy := time.Now().Add(time.Hour)
			each(b.N, func(i int) error {
				id := fmt.Sprintf("O%07d", i)
				if _, err := st.CreateQueuedOrder(ctx, store.Order{OrderID: id, UserID: int64(i + 1), ItemID: it.ID, PayBy: &payBy}); err != nil {
					return err
				}
				_, err := st.SavePayment(ctx, store.Payment{OrderID: id, UserID: int64(i + 1), ItemID: it.ID, Provider: "testpay",
					ProviderPaymentID: "pi_" + id, Amount: 100, Currency: "EUR", PayBy: payBy})
				return err
			}, 16)
			if err := st.DB().Exec("UPDATE seckill_order SET status = 'PENDING_PAYMENT' WHERE item_id = ?", it.ID).Error; err != nil {
				b.Fatal(err)
			}
			decide := func(i int) error {
				id := fmt.Sprintf("O%07d", i)
				_, _, err := st.RecordPayment(ctx, id, int64(i+1), time.Now(), false)
				return err
			}
			if name != "door" {
				var apply interface {
					ApplyPaymentEvent(context.Context, store.PaymentEvent) (store.EventResult, error)
				} = st
				if name == "notification-batched" {
					bt := store.NewBatcher(st, 4, 128)
					defer bt.Close()
					apply = bt
				}
				decide = func(i int) error {
					r, err := apply.ApplyPaymentEvent(ctx, succeeded(fmt.Sprintf("evt_%d", i), fmt.Sprintf("pi_O%07d", i), time.Now()))
					if err == nil && r.Verdict != store.VerdictPaid {
						err = fmt.Errorf("verdict %s", r.Verdict)
					}
					return err
				}
			}
			b.ResetTimer()
			t0 := time.Now()
			each(b.N, decide, 512)
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "decisions/s")
		})
	}
}

// each runs fn(0..n-1) on workers goroutines, failing on the first error.
func each(n int, fn func(i int) error, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := fn(i); err != nil {
					panic(err)
				}
			}
		})
	}
	wg.Wait()
}
