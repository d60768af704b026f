package secure_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/bench"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/internal/testenv"
	"github.com/seckill/seckill/queue"
)

const saleSecret = "secure-sale-test-secret-0123456789abcdef"

// saleUnits is the size of runSale's sale: every unit is bought, paid and
// settled, so each order's message crosses the broker and each saga runs
// to its end.
const saleUnits = 8

// runSale runs a small sale through `seckill api` and `seckill worker`
// processes on the stack's Redis and MySQL (the test's own database and key
// prefix) with the given RocketMQ (its name servers, brokers and
// credentials; the test's own topic and groups) and Temporal (its address,
// namespace and TLS; the test's own task queue): every unit is bought (202),
// reaches PENDING_PAYMENT (the relay sent its message, the consumer started
// its saga), is paid and ends PAID and settled (the saga took the unit from
// MySQL). extra are more SECKILL_* settings for both roles.
func runSale(t *testing.T, rmq config.RocketMQ, tmp config.Temporal, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := testenv.SeckillBinary(t)
	_, mcfg := testenv.MySQL(t)
	_, prefix := testenv.Redis(t)
	rmq.Topic = testenv.Name(t, "orders")
	if err := queue.EnsureTopic(ctx, rmq, rmq.Topic, 2); err != nil {
		t.Fatalf("create topic: %v", err)
	}
	tmp.TaskQueue = testenv.Name(t, "saga")
	tc, err := temporalx.Dial(ctx, tmp, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Temporal at %s: %v", tmp.Address, err)
	}
	t.Cleanup(tc.Close)
	t.Cleanup(func() { testenv.TerminateLeftovers(tc, tmp.Namespace, tmp.TaskQueue) })

	env := append(os.Environ(),
		"SECKILL_DEV=1", "SECKILL_LOG_LEVEL=info", "SECKILL_JWT_SECRET="+saleSecret,
		"SECKILL_MYSQL_DATABASE="+mcfg.Database, "SECKILL_REDIS_KEY_PREFIX="+prefix,
		"SECKILL_ROCKETMQ_NAMESRV="+strings.Join(rmq.NameServers, ","),
		"SECKILL_ROCKETMQ_BROKER="+strings.Join(rmq.Brokers, ","),
		"SECKILL_ROCKETMQ_ACCESS_KEY="+rmq.AccessKey, "SECKILL_ROCKETMQ_SECRET_KEY="+rmq.SecretKey.Value(),
		"SECKILL_ROCKETMQ_TOPIC="+rmq.Topic,
		"SECKILL_ROCKETMQ_PRODUCER_GROUP="+testenv.Name(t, "pg"),
		"SECKILL_ROCKETMQ_CONSUMER_GROUP="+testenv.Name(t, "cg"),
		"SECKILL_WORKER_DLQ_GROUP="+testenv.Name(t, "dlq"),
		"SECKILL_TEMPORAL_ADDRESS="+tmp.Address, "SECKILL_TEMPORAL_NAMESPACE="+tmp.Namespace,
		"SECKILL_TEMPORAL_TASK_QUEUE="+tmp.TaskQueue,
		fmt.Sprintf("SECKILL_TEMPORAL_TLS=%t", tmp.TLS), "SECKILL_TEMPORAL_TLS_CA="+tmp.TLSFiles.CA,
		"SECKILL_TEMPORAL_TLS_CERT="+tmp.TLSFiles.Cert, "SECKILL_TEMPORAL_TLS_KEY="+tmp.TLSFiles.Key,
		"SECKILL_TEMPORAL_TLS_SERVER_NAME="+tmp.TLSFiles.ServerName,
		"SECKILL_RECONCILE_INTERVAL=0",
	)
	env = append(env, extra...)
	logs := t.TempDir()
	apiAddr := testenv.FreeAddr(t)
	for _, r := range []struct{ role, extra string }{
		{"api", "SECKILL_API_ADDR=" + apiAddr},
		{"worker", "SECKILL_WORKER_METRICS_ADDR=" + testenv.FreeAddr(t)},
	} {
		log := filepath.Join(logs, r.role+".log")
		c, err := proc.Start(proc.Spec{Path: bin, Args: []string{r.role}, Env: append(env, r.extra), Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Stop(20 * time.Second)
			if t.Failed() {
				b, _ := os.ReadFile(log)
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("%s log (tail):\n%s", r.role, b)
			}
		})
	}
	url := "http://" + apiAddr
	if err := bench.WaitReady(ctx, url+"/healthz", time.Minute); err != nil {
		t.Fatalf("api: %v", err)
	}
	var item struct {
		ID int64 `json:"id"`
	}
	now := time.Now().UTC()
	body := fmt.Sprintf(`{"name":"secure sale","price_cents":100,"stock_total":%d,"start_at":%q,"end_at":%q}`,
		saleUnits, now.Add(-time.Minute).Format(time.RFC3339), now.Add(time.Hour).Format(time.RFC3339))
	if code := call(t, "POST", url+"/api/v1/items", 1, auth.RoleAdmin, body, &item); code != http.StatusCreated {
		t.Fatalf("create item: %d", code)
	}
	orders := make(map[int64]string, saleUnits)
	for user := int64(1); user <= saleUnits; user++ {
		var a struct {
			OrderID string `json:"order_id"`
		}
		if code := call(t, "POST", fmt.Sprintf("%s/api/v1/seckill/%d", url, item.ID), user, auth.RoleBuyer, "", &a); code != http.StatusAccepted {
			t.Fatalf("buyer %d: purchase answered %d", user, code)
		}
		orders[user] = a.OrderID
	}
	type view struct {
		Status   string `json:"status"`
		Settling bool   `json:"settling"`
	}
	await := func(user int64, want string) {
		var v view
		for {
			if call(t, "GET", url+"/api/v1/orders/"+orders[user], user, auth.RoleBuyer, "", &v) == http.StatusOK &&
				v.Status == want && !v.Settling {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("buyer %d: order %s is %s (settling %t), want %s", user, orders[user], v.Status, v.Settling, want)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	for user := range orders {
		await(user, "PENDING_PAYMENT")
	}
	for user, id := range orders {
		if code := call(t, "POST", url+"/api/v1/orders/"+id+"/pay", user, auth.RoleBuyer, "", nil); code != http.StatusOK {
			t.Fatalf("buyer %d: pay answered %d", user, code)
		}
	}
	for user := range orders {
		await(user, "PAID")
	}
	t.Logf("%d orders bought, sent through the broker, paid and settled by their sagas", len(orders))
}

// call sends an authenticated request and decodes a JSON answer into out
// (when not nil); it returns the status code.
func call(t *testing.T, method, url string, user int64, role auth.Role, body string, out any) int {
	t.Helper()
	tok, err := auth.Sign([]byte(saleSecret), user, role, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, url, err, b)
		}
	} else if res.StatusCode >= 300 {
		t.Logf("%s %s: %d %s", method, url, res.StatusCode, b)
	}
	return res.StatusCode
}
