package worker_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/worker"
)

// The gate is pure Go (channels and a mutex), so each test runs in a
// synctest bubble: synctest.Wait returns once every goroutine of the bubble
// is blocked, which is the positive signal that a held handler has reached
// the gate and stays there, however slow the machine.

func TestGateHoldsHandlersUntilRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := worker.NewGate()
		m := worker.NewMetrics(g)
		var handled atomic.Int32
		h := g.Handler(func(context.Context, *primitive.MessageExt) error { handled.Add(1); return nil })
		ctx := context.Background()
		expectHeldGauge(t, m, "0")

		if err := h(ctx, &primitive.MessageExt{}); err != nil || handled.Load() != 1 {
			t.Fatalf("open gate: err %v, handled %d, want nil, 1", err, handled.Load())
		}
		g.Set(true)
		g.Set(true) // idempotent
		if !g.Held() {
			t.Fatal("Held() = false after Hold")
		}
		expectHeldGauge(t, m, "1")
		done := make(chan error, 3)
		for range 3 {
			go func() { done <- h(ctx, &primitive.MessageExt{}) }()
		}
		synctest.Wait()       // all three are blocked: at the gate, or done had their answer
		time.Sleep(time.Hour) // the bubble's clock: a hold has no timeout
		synctest.Wait()
		if n := len(done); n != 0 {
			t.Fatalf("%d held handlers returned (%v) before Release", n, <-done)
		}
		if n := handled.Load(); n != 1 {
			t.Fatalf("handled %d while held, want 1", n)
		}
		g.Set(false)
		g.Set(false) // idempotent
		for range 3 {
			if err := <-done; err != nil {
				t.Fatalf("released handler: %v", err)
			}
		}
		if n := handled.Load(); n != 4 {
			t.Fatalf("handled %d after Release, want 4", n)
		}
		expectHeldGauge(t, m, "0")
	})
}

// expectHeldGauge scrapes the worker's metrics for the held gauge.
func expectHeldGauge(t *testing.T, m *worker.Metrics, want string) {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if line := "seckill_worker_consumer_held " + want; !strings.Contains(rec.Body.String(), line+"\n") {
		t.Fatalf("metrics lack %q", line)
	}
}

func TestGateCloseFailsHeldHandlers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := worker.NewGate()
		var handled atomic.Int32
		h := g.Handler(func(context.Context, *primitive.MessageExt) error { handled.Add(1); return nil })
		g.Set(true)
		done := make(chan error, 1)
		go func() { done <- h(context.Background(), &primitive.MessageExt{}) }()
		synctest.Wait() // the handler waits at the gate: Close must wake a waiter, not only later callers
		if len(done) != 0 {
			t.Fatalf("held handler returned (%v) before Close", <-done)
		}
		g.Close()
		if err := <-done; !errors.Is(err, worker.ErrGateClosed) {
			t.Fatalf("held handler after Close: %v, want ErrGateClosed", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h(ctx, &primitive.MessageExt{}); err == nil {
			t.Fatal("held handler with a cancelled context returned nil")
		}
		if n := handled.Load(); n != 0 {
			t.Fatalf("handled %d, want 0: nothing passes a held gate", n)
		}
	})
}
