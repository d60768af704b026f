package testkit

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// Slice is one deployment's private slice of the local stack, for tests
// that run `seckill` roles as child processes: a migrated database, a Redis
// key prefix, a topic (4 queues) with its producer, consumer and
// dead-letter groups, a task queue and an order signing key, all this
// test's own.
type Slice struct {
	Config config.Config // the stack's, with the slice's names in it
	Store  *store.Store
	Redis  redis.UniversalClient
	Stock  *stock.Store
}

// NewSlice opens a slice on the stack's services. Its item ids are this
// run's own (UniqueItemIDs).
func NewSlice(ctx context.Context, t *testing.T) *Slice {
	t.Helper()
	cfg := Config(t)
	st, mcfg := MySQL(t)
	rdb, prefix := Redis(t)
	cfg.MySQL = mcfg
	cfg.Redis.KeyPrefix = prefix
	cfg.RocketMQ = Topic(ctx, t, cfg.RocketMQ, 4)
	cfg.RocketMQ.ProducerGroup = Name(t, "pg")
	cfg.RocketMQ.ConsumerGroup = Name(t, "cg")
	cfg.Worker.DLQGroup = Name(t, "dlq")
	cfg.Temporal.TaskQueue = Name(t, "saga")
	// Of the production shape, so the slice's roles start without
	// SECKILL_DEV; the test's own producers sign with it too (s.Config).
	cfg.RocketMQ.OrderSigningKey = config.Secret(Suffix() + Suffix() + Suffix() + Suffix())
	seed := sha256.Sum256([]byte(cfg.RocketMQ.OrderSigningKey.Value() + ":events"))
	cfg.Events.SigningKey = config.Secret(base64.StdEncoding.EncodeToString(seed[:]))
	UniqueItemIDs(t, st)
	return &Slice{Config: cfg, Store: st, Redis: rdb, Stock: stock.New(rdb, prefix)}
}

// Names are the settings that point a child process at the slice.
func (s *Slice) Names() []string {
	c := s.Config
	return []string{
		"SECKILL_REDIS_KEY_PREFIX=" + c.Redis.KeyPrefix,
		"SECKILL_MYSQL_DATABASE=" + c.MySQL.Database,
		"SECKILL_ROCKETMQ_TOPIC=" + c.RocketMQ.Topic,
		"SECKILL_ROCKETMQ_PRODUCER_GROUP=" + c.RocketMQ.ProducerGroup,
		"SECKILL_ROCKETMQ_CONSUMER_GROUP=" + c.RocketMQ.ConsumerGroup,
		"SECKILL_WORKER_DLQ_GROUP=" + c.Worker.DLQGroup,
		"SECKILL_TEMPORAL_TASK_QUEUE=" + c.Temporal.TaskQueue,
		"SECKILL_ROCKETMQ_ORDER_SIGNING_KEY=" + c.RocketMQ.OrderSigningKey.Value(),
		"SECKILL_EVENTS_SIGNING_KEY=" + c.Events.SigningKey.Value(),
	}
}

// Env is the environment of the slice's child processes: this process's,
// the slice's names, info logs, then extra (a later setting wins).
func (s *Slice) Env(extra ...string) []string {
	env := append(os.Environ(), s.Names()...)
	return append(append(env, "SECKILL_LOG_LEVEL=info"), extra...)
}

// Temporal dials the slice's Temporal (see Temporal).
func (s *Slice) Temporal(ctx context.Context, t testing.TB, log *slog.Logger) client.Client {
	t.Helper()
	return Temporal(ctx, t, s.Config.Temporal, log)
}

// Sale puts an item of units on sale from a minute ago for an hour, with a
// payment window, and loads its stock into Redis.
func (s *Slice) Sale(ctx context.Context, t testing.TB, name string, units int64, window time.Duration) store.Item {
	t.Helper()
	it, err := s.Store.CreateItem(ctx, store.Item{Name: name, PriceCents: 100, StockTotal: units,
		StartAt: time.Now().Add(-time.Minute), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: int(window / time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stock.Load(ctx, it.ID, units); err != nil {
		t.Fatal(err)
	}
	return it
}

// UniqueItemIDs starts st's item ids at a value of this run's own.
// Temporal's SeckillItemId is global across test databases (and runs), and
// the invariant checker and the control room list an item's sagas by it.
func UniqueItemIDs(t testing.TB, st *store.Store) {
	t.Helper()
	if err := st.DB().Exec(fmt.Sprintf("ALTER TABLE item AUTO_INCREMENT = %d", time.Now().UnixNano()%1_000_000_000_000)).Error; err != nil {
		t.Fatal(err)
	}
}

// Topic creates a topic named for this test with queues queues on cfg's
// broker and returns cfg with it.
func Topic(ctx context.Context, t testing.TB, cfg config.RocketMQ, queues int) config.RocketMQ {
	t.Helper()
	cfg.Topic = Name(t, "orders")
	if err := queue.EnsureTopic(ctx, cfg, cfg.Topic, queues); err != nil {
		t.Fatalf("RocketMQ at %v: %v", cfg.NameServers, err)
	}
	return cfg
}

// Temporal dials cfg. When the test ends it terminates the sagas left on
// cfg's task queue (TerminateLeftovers) and closes the client.
func Temporal(ctx context.Context, t testing.TB, cfg config.Temporal, log *slog.Logger) client.Client {
	t.Helper()
	tc, err := temporalx.Dial(ctx, cfg, log)
	if err != nil {
		t.Fatalf("Temporal at %s: %v", cfg.Address, err)
	}
	t.Cleanup(tc.Close)
	t.Cleanup(func() { TerminateLeftovers(tc, cfg.Namespace, cfg.TaskQueue) })
	return tc
}

// Start runs spec as a child process until the test ends: then it is
// stopped (SIGTERM, killed after grace; a grace of 0 kills it at once) and,
// if the test failed, the tail of its log is printed.
func Start(t testing.TB, spec proc.Spec, grace time.Duration) *proc.Child {
	t.Helper()
	c, err := proc.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if grace == 0 {
			_ = c.Kill()
		} else {
			c.Stop(grace)
		}
		if t.Failed() {
			b, _ := os.ReadFile(spec.Log)
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("%s %v log (tail):\n%s", spec.Banner, spec.Args, b)
		}
	})
	return c
}

// WaitHTTP waits until url answers 200, failing the test when c (if given)
// exits first or within passes.
func WaitHTTP(t testing.TB, url string, c *proc.Child, within time.Duration) {
	t.Helper()
	hc := &http.Client{Timeout: 15 * time.Second}
	deadline := time.Now().Add(within)
	for {
		res, err := hc.Get(url)
		if err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return
			}
		}
		if c != nil {
			select {
			case <-c.Done():
				t.Fatalf("%s: the process exited: %v", url, c.Err())
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer 200 within %s (last: %v)", url, within, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Desk runs the door's payment desk over orders, the views board and the
// reservations, waking sagas through sagas, until the test ends.
func Desk(t testing.TB, orders payment.Orders, board interface {
	payment.Statuses
	payment.Views
}, units payment.Reservations, sagas payment.Sagas, log *slog.Logger) *payment.Desk {
	t.Helper()
	d, err := payment.New(orders, board, board, units, func() (payment.Sagas, error) { return sagas, nil },
		prometheus.NewCounter(prometheus.CounterOpts{Name: "wakes_skipped"}), payment.Options{WakeRate: 1000}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	return d
}
