package worker_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

// A `seckill worker` killed -9 mid-sale, while it publishes order events in
// small rounds, loses none: once a second worker has finished the sagas and
// taken over the lease, the shop holds exactly the changes MySQL records,
// duplicates only with the same event id and body (newShop checks).
func TestOrderEventsSurviveWorkerKill9(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	topic := testkit.Name(t, "events")
	if err := queue.EnsureTopic(ctx, s.Config.RocketMQ, topic, 4); err != nil {
		t.Fatal(err)
	}
	it := s.Sale(ctx, t, "events kill -9", 30, 8*time.Second) // 30 bought, then paid or canceled, in time on a busy machine
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	tc := s.Temporal(ctx, t, log)
	desk := testkit.Desk(t, s.Store, orderstatus.New(s.Redis, s.Config.Redis.KeyPrefix), s.Stock,
		workflows.NewClient(tc, s.Config.Temporal.TaskQueue), log)
	producer, err := queue.NewProducer(s.Config.RocketMQ)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = producer.Close() })
	shop := testkit.NewShop(t, s.Config, topic)

	bin, logPath := testkit.SeckillBinary(t), filepath.Join(t.TempDir(), "worker.log")
	worker := func(banner string) *proc.Child {
		env := s.Env("SECKILL_EVENTS_TOPIC="+topic, "SECKILL_EVENTS_POLL=20ms", "SECKILL_EVENTS_BATCH=2", "SECKILL_EVENTS_PARALLEL=1",
			"SECKILL_WORKER_METRICS_ADDR="+testkit.FreeAddr(t), "SECKILL_RECONCILE_INTERVAL=0")
		return testkit.Start(t, proc.Spec{Path: bin, Args: []string{"worker"}, Env: env, Log: logPath, Append: true, Banner: banner}, 0)
	}
	first := worker("worker 1")

	now := time.Now()
	payBy := order.Deadline(now, it.PaymentTimeoutSeconds)
	var ms []order.Message
	for i := range 30 {
		m := order.Message{OrderID: order.NewID(), ItemID: it.ID, UserID: int64(4001 + i), ReservedAt: now.UTC(), PayBy: &payBy}
		if _, err := s.Stock.Reserve(ctx, m); err != nil {
			t.Fatal(err)
		}
		if err := producer.PublishOrder(ctx, m); err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	for i, m := range ms { // a third paid, a third cancelled, a third closed unpaid at pay_by
		var err error
		switch i % 3 {
		case 0:
			_, err = desk.Pay(ctx, m.OrderID, m.UserID, time.Now())
		case 1:
			_, err = desk.Cancel(ctx, m.OrderID, m.UserID, time.Now())
		}
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); shop.Received() < 4; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no events published within a minute")
		}
	}
	if err := first.Kill(); err != nil {
		t.Fatal(err)
	}
	atKill := shop.Received()
	worker("worker 2")

	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		open := slices.ContainsFunc(ms, func(m order.Message) bool {
			o, err := s.Store.FindOrder(ctx, m.OrderID)
			return err != nil || !o.Status.Final()
		})
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("orders still open 2 min after the kill")
		}
	}
	want := testkit.OrderEventChanges(t, s.Store, it.ID, nil)
	if len(want) != len(ms) || atKill >= len(want) {
		t.Fatalf("%d changes for %d orders; %d events were received at the kill", len(want), len(ms), atKill)
	}
	if got := shop.WaitFor(want, len(want), time.Minute); !slices.Equal(got, want) {
		t.Fatalf("the shop received %v, MySQL recorded %v", got, want)
	}
	testkit.WaitPublished(t, s.Store)
	t.Logf("%d events, %d received before the kill -9", len(want), atKill)
}
