package stock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/testkit"
)

// Reservations keep every rule under a stampede: never below zero,
// one unit per buyer (a buyer racing himself inside one batch included), one
// outbox entry and one QUEUED view per unit taken.
func TestBatchedReserveStampede(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const item, units, buyers = 11, 300, 400
	if _, err := s.Load(ctx, item, units); err != nil {
		t.Fatal(err)
	}
	var won, soldOut, dup atomic.Int64
	var mu sync.Mutex
	winners := map[int64]string{}
	var wg sync.WaitGroup
	for g := 0; g < 2*buyers; g++ { // every buyer tries twice, concurrently
		user := int64(g%buyers + 1)
		wg.Go(func() {
			m := order.Message{OrderID: order.NewID(), ItemID: item, UserID: user, ReservedAt: time.Now().UTC()}
			_, err := s.Reserve(ctx, m)
			var already *stock.AlreadyReservedError
			switch {
			case err == nil:
				won.Add(1)
				mu.Lock()
				if prev, ok := winners[user]; ok {
					t.Errorf("buyer %d won twice: %s and %s", user, prev, m.OrderID)
				}
				winners[user] = m.OrderID
				mu.Unlock()
			case errors.Is(err, stock.ErrSoldOut):
				soldOut.Add(1)
			case errors.As(err, &already):
				dup.Add(1)
			default:
				t.Errorf("reserve: %v", err)
			}
		})
	}
	wg.Wait()
	if won.Load() != units {
		t.Fatalf("won %d, want %d (sold out %d, duplicate %d)", won.Load(), units, soldOut.Load(), dup.Load())
	}
	if left, _ := s.Left(ctx, item); left != 0 {
		t.Fatalf("stock_left %d, want 0", left)
	}
	k := s.ItemKeys(item)
	if n := rdb.XLen(ctx, k.Outbox).Val(); n != units {
		t.Fatalf("%d outbox entries, want %d", n, units)
	}
	views := orderstatus.New(rdb, prefix)
	for user, id := range winners {
		if v, ok, err := views.Status(ctx, id); err != nil || !ok || v.Status != order.StatusQueued || v.UserID != user {
			t.Fatalf("view of %s: %+v %v %v", id, v, ok, err)
		}
	}
}

// BenchmarkReserve reports the CPU of this process and of Redis per
// reservation, 32 purchases at a time.
func BenchmarkReserve(b *testing.B) {
	rdb, prefix := testkit.Redis(b)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const item = 1
	if _, err := s.Load(ctx, item, int64(b.N)+1); err != nil {
		b.Fatal(err)
	}
	var user atomic.Int64
	redis0, self0 := redisCPU(b, rdb), selfCPU()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m := order.Message{OrderID: order.NewID(), ItemID: item, UserID: user.Add(1), ReservedAt: time.Now().UTC()}
			if _, err := s.Reserve(ctx, m); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric((redisCPU(b, rdb)-redis0)/n, "redis-cpu-µs/op")
	b.ReportMetric((selfCPU()-self0)/n, "client-cpu-µs/op")
}

// redisCPU is Redis's own CPU time so far, in µs (INFO cpu).
func redisCPU(b *testing.B, rdb redis.UniversalClient) float64 {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total * 1e6
}

// selfCPU is this process's CPU time so far, in µs.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}

// The client sent a reservation again after its reply was lost (go-redis
// retries a command whose connection dropped): the second run meets the
// buyer's mark holding this very order id. That is the buyer's unit, not
// "already purchased", and nothing is taken twice.
func TestReserveSentTwiceIsOneReservation(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	const item = 12
	if _, err := s.Load(ctx, item, 5); err != nil {
		t.Fatal(err)
	}
	m := order.Message{OrderID: order.NewID(), ItemID: item, UserID: 7, ReservedAt: time.Now().UTC()}
	if left, err := s.Reserve(ctx, m); err != nil || left != 4 {
		t.Fatalf("first run: left %d, %v", left, err)
	}
	if left, err := s.Reserve(ctx, m); err != nil || left <= 0 {
		t.Fatalf("the same order sent again: left %d, %v; want its unit", left, err)
	}
	if left, _ := s.Left(ctx, item); left != 4 {
		t.Fatalf("stock_left %d after one reservation sent twice, want 4", left)
	}
	if n := rdb.XLen(ctx, s.ItemKeys(item).Outbox).Val(); n != 1 {
		t.Fatalf("%d outbox entries, want 1", n)
	}
	// Another attempt of the same buyer is still refused.
	m2 := order.Message{OrderID: order.NewID(), ItemID: item, UserID: 7, ReservedAt: time.Now().UTC()}
	var already *stock.AlreadyReservedError
	if _, err := s.Reserve(ctx, m2); !errors.As(err, &already) || already.OrderID != m.OrderID {
		t.Fatalf("second attempt: %v, want already reserved as %s", err, m.OrderID)
	}
}
