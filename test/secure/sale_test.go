package secure_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/cmd/seckill-bench/bench"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/migrations"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

const saleSecret = "secure-sale-test-secret-0123456789abcdef"

// A sale of runSale: saleUnits units, saleBuyers buyers racing for them.
// Every unit bought is paid and settled, so each order's message crosses
// the broker and each saga runs to its end.
const (
	saleUnits  = 50
	saleBuyers = 300
)

// backends are the services a sale runs on. A nil redis or mysql is the
// stack's, as testkit opens it; a given one is used with the sale's own key
// prefix and database (created and migrated through it). rocketmq and
// temporal are used as given, with the sale's own topic, groups and task
// queue.
type backends struct {
	redis    *config.Redis
	mysql    *config.MySQL
	rocketmq config.RocketMQ
	temporal config.Temporal
}

// runSale runs a small sale through `seckill api` and `seckill worker`
// processes on b: saleBuyers buyers race for saleUnits units, exactly
// saleUnits are bought (202) and the rest told sold out; every order
// reaches PENDING_PAYMENT (the relay sent its message, the consumer started
// its saga), is paid and ends PAID and settled (the saga took the unit from
// MySQL); then the invariant checker finds Redis, MySQL and Temporal
// agreeing with what buyers were told. extra are more SECKILL_* settings
// for both roles.
func runSale(t *testing.T, b backends, extra ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := testkit.SeckillBinary(t)
	st, mcfg := saleMySQL(ctx, t, b.mysql)
	rdb, rcfg := saleRedis(t, b.redis)
	testkit.UniqueItemIDs(t, st)
	rmq, tmp := testkit.Topic(ctx, t, b.rocketmq, 2), b.temporal
	tmp.TaskQueue = testkit.Name(t, "saga")
	tc := testkit.Temporal(ctx, t, tmp, slog.New(slog.DiscardHandler))

	env := append(os.Environ(),
		"SECKILL_DEV=1", "SECKILL_LOG_LEVEL=info", "SECKILL_JWT_SECRET="+saleSecret,
		"SECKILL_API_IP_RPS=100000", "SECKILL_API_IP_BURST=100000",
		"SECKILL_MYSQL_HOST="+mcfg.Host, fmt.Sprintf("SECKILL_MYSQL_PORT=%d", mcfg.Port),
		"SECKILL_MYSQL_USER="+mcfg.User, "SECKILL_MYSQL_PASSWORD="+mcfg.Password.Value(),
		"SECKILL_MYSQL_DATABASE="+mcfg.Database,
		"SECKILL_REDIS_ADDR="+rcfg.Addr, "SECKILL_REDIS_ADDRS="+strings.Join(rcfg.Addrs, ","),
		fmt.Sprintf("SECKILL_REDIS_CLUSTER=%t", rcfg.Cluster), "SECKILL_REDIS_SENTINEL_MASTER="+rcfg.MasterName,
		"SECKILL_REDIS_USERNAME="+rcfg.Username, "SECKILL_REDIS_PASSWORD="+rcfg.Password.Value(),
		"SECKILL_REDIS_SENTINEL_USERNAME="+rcfg.SentinelUsername,
		"SECKILL_REDIS_SENTINEL_PASSWORD="+rcfg.SentinelPassword.Value(),
		"SECKILL_REDIS_KEY_PREFIX="+rcfg.KeyPrefix,
		"SECKILL_ROCKETMQ_NAMESRV="+strings.Join(rmq.NameServers, ","),
		"SECKILL_ROCKETMQ_BROKER="+strings.Join(rmq.Brokers, ","),
		"SECKILL_ROCKETMQ_ACCESS_KEY="+rmq.AccessKey, "SECKILL_ROCKETMQ_SECRET_KEY="+rmq.SecretKey.Value(),
		"SECKILL_ROCKETMQ_TOPIC="+rmq.Topic,
		"SECKILL_ROCKETMQ_PRODUCER_GROUP="+testkit.Name(t, "pg"),
		"SECKILL_ROCKETMQ_CONSUMER_GROUP="+testkit.Name(t, "cg"),
		"SECKILL_WORKER_DLQ_GROUP="+testkit.Name(t, "dlq"),
		"SECKILL_TEMPORAL_ADDRESS="+tmp.Address, "SECKILL_TEMPORAL_NAMESPACE="+tmp.Namespace,
		"SECKILL_TEMPORAL_TASK_QUEUE="+tmp.TaskQueue,
		"SECKILL_RECONCILE_INTERVAL=0",
	)
	env = append(env, tlsEnv("REDIS", rcfg.TLS, rcfg.TLSFiles)...)
	env = append(env, tlsEnv("MYSQL", mcfg.TLS, mcfg.TLSFiles)...)
	env = append(env, tlsEnv("TEMPORAL", tmp.TLS, tmp.TLSFiles)...)
	env = append(env, extra...)
	logs := t.TempDir()
	apiAddr := testkit.FreeAddr(t)
	for _, r := range []struct{ role, extra string }{
		{"api", "SECKILL_API_ADDR=" + apiAddr},
		{"worker", "SECKILL_WORKER_METRICS_ADDR=" + testkit.FreeAddr(t)},
	} {
		testkit.Start(t, proc.Spec{Path: bin, Args: []string{r.role}, Env: append(env, r.extra), Log: filepath.Join(logs, r.role+".log")}, 20*time.Second)
	}
	url := "http://" + apiAddr
	if err := bench.WaitReady(ctx, url+"/readyz", time.Minute); err != nil {
		t.Fatalf("api: %v", err)
	}
	api := testkit.Client(t, url)
	now := time.Now().UTC()
	created, err := api.CreateItemWithResponse(ctx, apiclient.CreateItem{Name: "secure sale", PriceCents: 100, StockTotal: saleUnits,
		StartAt: now.Add(-time.Minute), EndAt: now.Add(time.Hour)}, as(t, 1, auth.RoleAdmin))
	if err := apiclient.Want(created, err, http.StatusCreated); err != nil {
		t.Fatalf("create item: %v", err)
	}
	item := created.JSON201
	orders := buy(t, api, item.ID)
	await := func(user int64, want apiclient.OrderStatus) {
		var v apiclient.Order
		for {
			res, err := api.GetOrderWithResponse(ctx, orders[user], as(t, user, auth.RoleBuyer))
			if err := apiclient.Want(res, err, http.StatusOK); err != nil {
				t.Log(err)
			} else if v = *res.JSON200; v.Status == want && (v.Settling == nil || !*v.Settling) {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("buyer %d: order %s is %s (settling %v), want %s", user, orders[user], v.Status, v.Settling != nil && *v.Settling, want)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	for user := range orders {
		await(user, apiclient.OrderStatusPENDINGPAYMENT)
	}
	for user, id := range orders {
		res, err := api.PayOrderWithResponse(ctx, id, as(t, user, auth.RoleBuyer))
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			t.Fatalf("buyer %d: pay: %v", user, err)
		}
	}
	for user := range orders {
		await(user, apiclient.OrderStatusPAID)
	}
	acc := make([]invariant.Accepted, 0, len(orders))
	for user, id := range orders {
		acc = append(acc, invariant.Accepted{OrderID: id, UserID: user})
	}
	deps := invariant.Deps{Store: st, Stock: stock.New(rdb, rcfg.KeyPrefix),
		Workflows: snapshot.TemporalLister{Client: tc, Namespace: tmp.Namespace}}
	for attempt := 0; ; attempt++ { // visibility catches up with the last closes
		rep, err := invariant.Check(ctx, deps, invariant.Input{ItemID: item.ID, Accepted: acc, AcceptedComplete: true})
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() {
			break
		}
		if attempt == 10 {
			t.Fatalf("invariants: %v", rep.Violations)
		}
		time.Sleep(time.Second)
	}
	t.Logf("%d buyers, %d orders bought, sent through the broker, paid and settled by their sagas; invariants clean",
		saleBuyers, len(orders))
}

// buy has saleBuyers buyers (16 at a time) try to buy item on api (again
// after an answer that says to): exactly saleUnits are accepted, every
// other is told the item is sold out. It returns the accepted buyers' order
// ids.
func buy(t *testing.T, api *apiclient.ClientWithResponses, item int64) map[int64]string {
	t.Helper()
	var mu sync.Mutex
	orders := map[int64]string{}
	codes := map[int]int{}
	next := make(chan int64)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for user := range next {
				// 503 (nothing reserved) and 429 say "try again": a buyer
				// does, as on a busy box the API's 2 s Redis timeout can pass.
				var a *apiclient.PurchaseResponse
				for try := 0; try < 11; try++ {
					if try > 0 {
						time.Sleep(200 * time.Millisecond)
					}
					var err error
					if a, err = api.PurchaseWithResponse(context.Background(), item, as(t, user, auth.RoleBuyer)); err != nil {
						t.Errorf("buyer %d: %v", user, err)
						break
					}
					if code := a.StatusCode(); code != http.StatusServiceUnavailable && code != http.StatusTooManyRequests {
						break
					}
				}
				if a == nil {
					continue
				}
				if code := a.StatusCode(); code != http.StatusAccepted && code != http.StatusGone {
					t.Logf("buyer %d: %s %s", user, a.Status(), a.Body)
				}
				mu.Lock()
				codes[a.StatusCode()]++
				if a.JSON202 != nil {
					orders[user] = a.JSON202.OrderID
				}
				mu.Unlock()
			}
		}()
	}
	for user := int64(1000); user < 1000+saleBuyers; user++ {
		next <- user
	}
	close(next)
	wg.Wait()
	if len(orders) != saleUnits || codes[http.StatusGone] != saleBuyers-saleUnits {
		t.Fatalf("%d buyers for %d units were answered %v; want %d 202 and the rest 410", saleBuyers, saleUnits, codes, saleUnits)
	}
	return orders
}

// saleMySQL is the sale's database: the stack's (testenv) when cfg is nil,
// else a database of its own on cfg's server, created and migrated through
// cfg's connection (TLS included) and dropped when the test ends.
func saleMySQL(ctx context.Context, t *testing.T, cfg *config.MySQL) (*store.Store, config.MySQL) {
	t.Helper()
	if cfg == nil {
		return testkit.MySQL(t)
	}
	m := *cfg
	m.Database = "seckill_t_" + testkit.Suffix()
	admin := openMySQL(t, *cfg)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+m.Database+"` CHARACTER SET utf8mb4"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS `" + m.Database + "`") })
	dsn, err := m.DSN()
	if err != nil {
		t.Fatal(err)
	}
	mig, err := migrations.New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = mig.Close() }()
	if err := mig.Up(); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, m
}

// saleRedis is the sale's Redis and its config (KeyPrefix the sale's own):
// the stack's (testenv) when cfg is nil, else a client of cfg.
func saleRedis(t *testing.T, cfg *config.Redis) (redis.UniversalClient, config.Redis) {
	t.Helper()
	if cfg == nil {
		rdb, prefix := testkit.Redis(t)
		r := testkit.Config(t).Redis
		r.KeyPrefix = prefix
		return rdb, r
	}
	r := *cfg
	r.KeyPrefix = "seckill_t_" + testkit.Suffix()
	rdb, err := redisx.Open(r, redisx.Options{PoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, r
}

// tlsEnv is the SECKILL_<name>_TLS* settings of on and f.
func tlsEnv(name string, on bool, f config.TLSFiles) []string {
	p := "SECKILL_" + name + "_TLS"
	return []string{fmt.Sprintf("%s=%t", p, on), p + "_CA=" + f.CA, p + "_CERT=" + f.Cert, p + "_KEY=" + f.Key,
		p + "_SERVER_NAME=" + f.ServerName}
}

// as makes a call user's with role (a token signed with saleSecret).
func as(t *testing.T, user int64, role auth.Role) apiclient.RequestEditorFn {
	return testkit.As(t, []byte(saleSecret), user, role)
}
