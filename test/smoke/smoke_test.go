// Package smoke holds one round-trip test per real service of the local stack,
// each through the project's own client code. `make test` runs them first:
// when one fails, the service it names is the place to look.
package smoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

func TestRedisLuaRoundTrip(t *testing.T) {
	rdb, prefix := testkit.Redis(t)
	s := stock.New(rdb, prefix)
	ctx := context.Background()
	if _, err := s.Load(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	m := order.Message{OrderID: order.NewID(), ItemID: 1, UserID: 1001, ReservedAt: time.Now().UTC()}
	left, err := s.Reserve(ctx, m)
	if err != nil || left != 0 {
		t.Fatalf("reserve via Lua: left=%d err=%v", left, err)
	}
	got, ok, err := s.Reservation(ctx, 1, m.OrderID)
	if err != nil || !ok || got.UserID != 1001 {
		t.Fatalf("reservation read back: %+v %v %v", got, ok, err)
	}
	if _, err := s.Reserve(ctx, order.Message{OrderID: order.NewID(), ItemID: 1, UserID: 1002}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("want sold out, got %v", err)
	}
}

func TestMySQLMigrationsAndGorm(t *testing.T) {
	st, _ := testkit.MySQL(t)
	ctx := context.Background()
	for _, table := range []string{"item", "stock", "seckill_order", "stock_deduction", "schema_migrations"} {
		if !st.DB().Migrator().HasTable(table) {
			t.Fatalf("table %s missing after migrate up", table)
		}
	}
	start := time.Now().UTC().Truncate(time.Millisecond)
	it, err := st.CreateItem(ctx, store.Item{Name: "smoke", PriceCents: 100, StockTotal: 5,
		StartAt: start, EndAt: start.Add(time.Hour), PaymentTimeoutSeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.GetItem(ctx, it.ID)
	if err != nil || got.Name != "smoke" || !got.StartAt.Equal(start) {
		t.Fatalf("gorm read back: %+v %v", got, err)
	}
	state, err := st.ReadItemState(ctx, it.ID)
	if err != nil || state.Stock.Stock != 5 || state.Stock.Version != 0 {
		t.Fatalf("stock row: %+v %v", state.Stock, err)
	}
	o := store.Order{OrderID: order.NewID(), UserID: 1, ItemID: it.ID, Status: order.StatusPendingPayment}
	if err := st.DB().WithContext(ctx).Create(&o).Error; err != nil {
		t.Fatal(err)
	}
	dup := store.Order{OrderID: order.NewID(), UserID: 1, ItemID: it.ID, Status: order.StatusPendingPayment}
	if err := st.DB().WithContext(ctx).Create(&dup).Error; err == nil {
		t.Fatal("UNIQUE(user_id, item_id) did not stop a second order of one buyer")
	}
}

func TestRocketMQProduceConsume(t *testing.T) {
	testkit.Integration(t)
	cfg := testkit.Config(t).RocketMQ
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	topic := testkit.Name(t, "smoke")
	if err := queue.EnsureTopic(ctx, cfg, topic, 1); err != nil {
		t.Fatalf("RocketMQ at %v/%s: %v", cfg.NameServers, cfg.Brokers, err)
	}
	cfg.Topic = topic
	cfg.ProducerGroup = testkit.Name(t, "smoke-producer")
	p, err := queue.NewProducer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Close() }()
	want := order.Message{OrderID: order.NewID(), ItemID: 9, UserID: 1001, ReservedAt: time.Now().UTC().Truncate(time.Millisecond)}
	// The broker learns of a new topic's route a moment after creating it.
	for {
		if err = p.PublishOrder(ctx, want); err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	got := make(chan *primitive.MessageExt, 1)
	c, err := queue.NewConsumer(queue.ConsumerOptions{NameServers: cfg.NameServers, Group: testkit.Name(t, "smoke-group"),
		Topic: topic, FromFirstOffset: true, MaxReconsume: 16, Goroutines: 20, Log: testkit.Logger(t)}, func(_ context.Context, m *primitive.MessageExt) error {
		select {
		case got <- m:
		default:
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	select {
	case m := <-got:
		if m.GetKeys() != want.OrderID {
			t.Fatalf("key %q, want %q", m.GetKeys(), want.OrderID)
		}
		body, err := order.DecodeMessage(m.Body)
		if err != nil || body != want {
			t.Fatalf("body %+v (%v), want %+v", body, err, want)
		}
		// The signature property survives the broker: the worker can check it.
		if err := queue.NewSigner(cfg).Verify(&m.Message); err != nil {
			t.Fatalf("consumed message: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("no message consumed back from", topic)
	}
}

func smokeWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: 5 * time.Second})
	var out string
	err := workflow.ExecuteLocalActivity(ctx, func(_ context.Context, n string) (string, error) {
		return "hello " + n, nil
	}, name).Get(ctx, &out)
	return out, err
}

func TestTemporalWorkflowVisibleInUI(t *testing.T) {
	testkit.Integration(t)
	cfg := testkit.Config(t).Temporal
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := temporalx.Dial(ctx, cfg, slog.Default())
	if err != nil {
		t.Fatalf("Temporal at %s: %v", cfg.Address, err)
	}
	defer c.Close()
	queueName := testkit.Name(t, "smoke")
	w := worker.New(c, queueName, worker.Options{})
	w.RegisterWorkflowWithOptions(smokeWorkflow, workflow.RegisterOptions{Name: "SmokeWorkflow"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	id := "smoke-" + order.NewID()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queueName}, "SmokeWorkflow", "seckill")
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil || out != "hello seckill" {
		t.Fatalf("workflow result %q, %v", out, err)
	}

	// Support staff find workflows through the UI server: its HTTP API on the
	// UI port must list this one as completed. Visibility is eventually consistent.
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/workflows?query=%s", cfg.UIURL, cfg.Namespace,
		url.QueryEscape(fmt.Sprintf("WorkflowId = %q", id)))
	for {
		status, err := uiWorkflowStatus(ctx, u)
		if err == nil && status == "WORKFLOW_EXECUTION_STATUS_COMPLETED" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("workflow %s not found completed through the UI API %s: status %q, err %v", id, u, status, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func uiWorkflowStatus(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("UI API answered %s", res.Status)
	}
	var body struct {
		Executions []struct {
			Status string `json:"status"`
		} `json:"executions"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return "", err
	}
	if len(body.Executions) == 0 {
		return "", nil
	}
	return body.Executions[0].Status, nil
}
