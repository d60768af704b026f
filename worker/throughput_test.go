package worker_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// TestSagaThroughput measures sagas per second from published message to
// PENDING_PAYMENT (all orders of one item, so every DecrementStock contends
// for the same stock row). A measurement, not an assertion; it runs only with
// SECKILL_SAGA_BENCH=1 (SECKILL_SAGA_BENCH_N orders, default 500):
//
//	SECKILL_SAGA_BENCH=1 go test ./worker/ -run Throughput -v
func TestSagaThroughput(t *testing.T) {
	if os.Getenv("SECKILL_SAGA_BENCH") != "1" {
		t.Skip("measurement: set SECKILL_SAGA_BENCH=1")
	}
	n := 500
	if v, err := strconv.Atoi(os.Getenv("SECKILL_SAGA_BENCH_N")); err == nil && v > 0 {
		n = v
	}
	p := newPipeline(t, pipelineOptions{})
	ctx := context.Background()
	it := p.item(int64(n), time.Hour)
	msgs := make([]order.Message, 0, n)
	for i := range n {
		m, err := p.reserve(it.ID, int64(10000+i))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	start := time.Now()
	for _, m := range msgs {
		if err := p.producer.PublishOrder(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	published := time.Since(start)
	deadline := start.Add(10 * time.Minute)
	var done int64
	for time.Now().Before(deadline) {
		if err := p.st.DB().Model(&store.Order{}).Where("item_id = ? AND status = ?", it.ID, order.StatusPendingPayment).
			Count(&done).Error; err != nil {
			t.Fatal(err)
		}
		if done == int64(n) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	elapsed := time.Since(start)
	if done != int64(n) {
		t.Fatalf("%d of %d orders pending after %s", done, n, elapsed)
	}
	t.Logf("%d sagas message -> PENDING_PAYMENT in %s: %.1f sagas/s (publishing took %s)",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), published.Round(time.Millisecond))
	p.wantStock(it.ID, 0)
	// The open sagas are left to the task queue; they belong to this test's
	// private queue and database and simply wait out their window.
}
