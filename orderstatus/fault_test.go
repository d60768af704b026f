package orderstatus_test

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/nemesis"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
	"github.com/seckill/seckill/testkit"
)

// A Redis whose replies are lost fails a publish at its context's deadline
// (the saga's Notify: a second), not at the client's read timeout: the
// workflow task that runs it is not held for seconds.
func TestPublishFailsAtItsDeadlineWhenRepliesAreLost(t *testing.T) {
	testkit.Integration(t)
	nem := testkit.Nemesis(t)
	port := 20000 + int(time.Now().UnixNano()%12000)
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Skipf("redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	rdb, err := redisx.Open(config.Redis{Addr: "127.0.0.1:" + strconv.Itoa(port), PoolSize: 4}, redisx.Options{Name: "fault-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	b := orderstatus.New(rdb, "T:")
	v := order.View{OrderID: order.NewID(), ItemID: 1, UserID: 1, Status: order.StatusPendingPayment}
	publish := func() (time.Duration, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		err := b.PublishStatus(ctx, v)
		return time.Since(start), err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := publish(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d never answered: %v", port, err)
		}
	}
	f := nem.Replies(nemesis.Ports(port))
	took, err := publish()
	if err == nil || took > 1500*time.Millisecond {
		t.Fatalf("publish with its replies lost: %v after %s, want an error within about a second", err, took)
	}
	if _, err := f.Heal(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := publish(); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("publish after the heal: %v", err)
		}
	}
}
