// The live-sale repair test: `seckill reconcile --repair` in a tight loop
// and the worker's periodic repair (every 1 s) run through a whole sale —
// 2,000 units, 20,000 buyers, 10 s payment windows, buyers paying and
// cancelling at the door, Redis killed -9 and restarted in the middle, and
// drift planted while buyers buy — and the sale still ends exact. Redis is a
// private redis-server (its own port and directory, AOF fsynced on every
// write), so killing it disturbs no one else, and Temporal is a private dev
// server (in memory), so the sagas of this sale neither slow nor are slowed
// by the shared one:
//
//	flock /tmp/seckill-failover.lock env SECKILL_FAILOVER=1 go test ./test/failover/ -run LiveRepair -v
//
// -live-repair.units, -live-repair.buyers and -live-repair.rate size the sale.

package failover_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

const repairSecret = "live-repair-test-secret-32-bytes!"

var (
	// The sale: 2,000 units and 20,000 buyers at 700 attempts a
	// second (about 100 s with -race on 2 otherwise idle cores). The failover
	// tests run one at a time, so the private Temporal dev server has the
	// machine to itself; smaller sales by flags for a quick run.
	liveUnits  = flag.Int64("live-repair.units", 2000, "units of the live-repair sale")
	liveBuyers = flag.Int64("live-repair.buyers", 20000, "buyers of the live-repair sale")
	liveRate   = flag.Int64("live-repair.rate", 700, "purchase attempts per second of the live-repair sale")
)

// startPrivateTemporal runs a Temporal dev server of this test's own (in
// memory, the search attributes registered) and returns its address.
func startPrivateTemporal(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("SECKILL_TEMPORAL_CLI")
	if bin == "" {
		cache := os.Getenv("SECKILL_CACHE_DIR")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "seckill")
		}
		bin = filepath.Join(cache, "temporal-1.5.1", "bin", "temporal")
		if _, err := os.Stat(bin); err != nil {
			if bin, err = exec.LookPath("temporal"); err != nil {
				t.Fatalf("temporal CLI not found (scripts/stack up installs it): %v", err)
			}
		}
	}
	addr := testkit.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	free := func() string { a := testkit.FreeAddr(t); return a[strings.LastIndex(a, ":")+1:] }
	c, err := proc.Start(proc.Spec{Path: bin, Args: []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", port,
		"--http-port", free(), "--metrics-port", free(), "--headless", "--log-level", "error",
		"--dynamic-config-value", "system.enableActivityEagerExecution=true",
		"--search-attribute", "SeckillItemId=Int", "--search-attribute", "SeckillUserId=Int",
		"--search-attribute", "SeckillOrderStatus=Keyword"}, Log: filepath.Join(t.TempDir(), "temporal.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-c.Done():
			t.Errorf("the private Temporal server exited during the test: %v", c.Err())
		default:
		}
		c.Stop(10 * time.Second)
	})
	return addr
}

// privateRedis is a redis-server of this test's own.
type privateRedis struct {
	t    *testing.T
	addr string
	args []string
	log  string
	proc *proc.Child
}

func startPrivateRedis(t *testing.T) *privateRedis {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not installed: %v", err)
	}
	dir := t.TempDir()
	addr := testkit.FreeAddr(t)
	port := addr[strings.LastIndex(addr, ":")+1:]
	// appendfsync always: a kill -9 loses no acknowledged write, so every
	// buyer's 202 survives the restart (with everysec the last second of
	// reservations, and their outbox entries, could vanish).
	r := &privateRedis{t: t, addr: addr, log: filepath.Join(dir, "redis.log"),
		args: []string{"--bind", "127.0.0.1", "--port", port, "--dir", dir, "--appendonly", "yes",
			"--appendfsync", "always", "--save", "", "--daemonize", "no"}}
	r.args = append([]string{path}, r.args...)
	r.start()
	t.Cleanup(func() { _ = r.proc.Kill() })
	return r
}

func (r *privateRedis) start() {
	r.t.Helper()
	c, err := proc.Start(proc.Spec{Path: r.args[0], Args: r.args[1:], Log: r.log, Append: true, Banner: "redis-server"})
	if err != nil {
		r.t.Fatal(err)
	}
	r.proc = c
	rdb := redis.NewClient(&redis.Options{Addr: r.addr})
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for rdb.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.t.Fatalf("private redis on %s did not answer", r.addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restart kills the server with SIGKILL and starts it again on the same
// port and directory (it reloads the AOF); it returns how long it was away.
func (r *privateRedis) restart(down time.Duration) time.Duration {
	at := time.Now()
	_ = r.proc.Kill()
	time.Sleep(down)
	r.start()
	return time.Since(at)
}

// saleLog is what the buyers were told and did.
type saleLog struct {
	mu       sync.Mutex
	accepted map[string]int64 // order id -> buyer (202, or 409 naming the buyer's order)
	answers  map[int]int64
	paid     map[string]bool
	cancel   map[string]bool
	acted    map[string]bool
}

func (l *saleLog) answer(code int) {
	l.mu.Lock()
	l.answers[code]++
	l.mu.Unlock()
}

// repairRuns tallies what the reconcile loop did.
type repairRuns struct {
	mu       sync.Mutex
	runs     int
	errors   int
	found    map[string]int // kind -> unrepaired findings
	repaired map[string]int // kind -> repairs
	orders   map[string]int // "kind order" -> repairs of that order
}

func TestLiveRepairDuringASale(t *testing.T) {
	requireEnabled(t)
	units, buyers, rate := *liveUnits, *liveBuyers, *liveRate
	const (
		window  = 10 * time.Second
		grace   = time.Minute
		planted = 3 // drifts of each repairable kind planted mid-sale
	)
	ctx := context.Background()
	dir := t.TempDir()
	bin := testkit.SeckillBinary(t)
	// The slice's names, on a private Redis and a private Temporal.
	s := testkit.NewSlice(ctx, t)
	rd := startPrivateRedis(t)
	prefix := s.Config.Redis.KeyPrefix
	rdb := redis.NewClient(&redis.Options{Addr: rd.addr, MaxRetries: 20})
	t.Cleanup(func() { _ = rdb.Close() })
	stk := stock.New(rdb, prefix)
	s.Redis, s.Stock = rdb, stk
	st := s.Store
	cfg := s.Config
	cfg.Temporal.Address = startPrivateTemporal(t)
	var tc client.Client
	waitFor(t, time.Minute, "the private Temporal server", func() (bool, string) {
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var err error
		tc, err = temporalx.Dial(dctx, cfg.Temporal, testkit.Logger(t))
		return err == nil, fmt.Sprint(err)
	})
	t.Cleanup(tc.Close)
	t.Cleanup(func() { testkit.TerminateLeftovers(tc, cfg.Temporal.Namespace, cfg.Temporal.TaskQueue) })
	it := s.Sale(ctx, t, "live repair", units, window)

	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_REDIS_") && !strings.HasPrefix(kv, "SECKILL_TEMPORAL_ADDRESS=") {
			env = append(env, kv)
		}
	}
	env = append(append(env, s.Names()...),
		"SECKILL_REDIS_ADDR="+rd.addr,
		"SECKILL_TEMPORAL_ADDRESS="+cfg.Temporal.Address,
		"SECKILL_JWT_SECRET="+repairSecret,
		"SECKILL_API_GLOBAL_RPS=100000", "SECKILL_API_GLOBAL_BURST=100000",
		"SECKILL_API_BUYER_RPS=100", "SECKILL_API_BUYER_BURST=100",
		"SECKILL_LOG_LEVEL=info",
	)
	apiAddr, metricsAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	api := startChild(t, bin, filepath.Join(dir, "api.log"), "api", append(append([]string{}, env...), "SECKILL_API_ADDR="+apiAddr), "api")
	startChild(t, bin, filepath.Join(dir, "worker.log"), "worker", append(append([]string{}, env...),
		"SECKILL_WORKER_METRICS_ADDR="+metricsAddr,
		"SECKILL_RECONCILE_INTERVAL=1s", "SECKILL_RECONCILE_REPAIR=true", "SECKILL_RECONCILE_GRACE="+grace.String()), "worker")
	apiURL := "http://" + apiAddr
	testkit.WaitHTTP(t, apiURL+"/healthz", api.Child, time.Minute)
	testkit.WaitHTTP(t, "http://"+metricsAddr+"/metrics", nil, time.Minute)

	// The reconcile loop: the CLI, back to back, repairing.
	runs := &repairRuns{found: map[string]int{}, repaired: map[string]int{}, orders: map[string]int{}}
	loopCtx, stopLoop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		for loopCtx.Err() == nil {
			cmd := exec.Command(bin, "reconcile", "--item", fmt.Sprint(it.ID), "--repair", "--json", "--grace", grace.String())
			cmd.Env = env
			out, err := cmd.Output()
			var rep reconcile.Report
			runs.mu.Lock()
			runs.runs++
			if jerr := json.Unmarshal(out, &rep); jerr != nil {
				runs.errors++
				var ee *exec.ExitError
				if runs.errors <= 5 && errors.As(err, &ee) {
					t.Logf("reconcile run %d: %v: %s", runs.runs, err, strings.TrimSpace(string(ee.Stderr)))
				}
			}
			for _, f := range rep.Findings {
				if f.Repaired {
					runs.repaired[f.Kind]++
					runs.orders[f.Kind+" "+f.OrderID]++
				} else {
					runs.found[f.Kind]++
				}
			}
			runs.mu.Unlock()
		}
	}()

	// Buyers: each tries once (again after a 503 or 429), paced.
	sale := &saleLog{accepted: map[string]int64{}, answers: map[int]int64{}, paid: map[string]bool{}, cancel: map[string]bool{}, acted: map[string]bool{}}
	door, err := apiclient.New(apiURL, "", &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}})
	if err != nil {
		t.Fatal(err)
	}
	as := func(user int64) apiclient.RequestEditorFn {
		tok, err := auth.Sign([]byte(repairSecret), user, auth.RoleBuyer, 2*time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return apiclient.Bearer(tok)
	}
	// purchase is the answer's status (0: none) and the order it names (a
	// 202's, or the buyer's in a 409).
	purchase := func(user int64) (int, string) {
		res, err := door.PurchaseWithResponse(context.Background(), it.ID, as(user))
		switch {
		case err != nil:
			return 0, ""
		case res.JSON202 != nil:
			return res.StatusCode(), res.JSON202.OrderID
		case res.JSON409 != nil && res.JSON409.Error.OrderID != nil:
			return res.StatusCode(), *res.JSON409.Error.OrderID
		}
		return res.StatusCode(), ""
	}
	// act pays or cancels the order: the answer's status (0: none).
	act := func(verb, id string, user int64) int {
		do := door.PayOrder
		if verb == "cancel" {
			do = door.CancelOrder
		}
		res, err := do(context.Background(), id, as(user))
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode
	}
	buy := func(user int64) {
		for attempt := 0; attempt < 30; attempt++ {
			code, id := purchase(user)
			sale.answer(code)
			switch code {
			case http.StatusAccepted, http.StatusConflict:
				if id != "" {
					sale.mu.Lock()
					sale.accepted[id] = user
					sale.mu.Unlock()
				}
				return
			case 0, http.StatusServiceUnavailable, http.StatusTooManyRequests:
				time.Sleep(500 * time.Millisecond)
				continue
			}
			return
		}
	}
	firstBuyer := time.Now().Unix()%1_000_000*100_000 + 1
	var sent atomic.Int64
	buyersDone := make(chan struct{})
	go func() {
		defer close(buyersDone)
		var wg sync.WaitGroup
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := range buyers {
			<-tick.C
			wg.Go(func() { buy(firstBuyer + i) })
			sent.Add(1)
		}
		wg.Wait()
	}()

	// The doors: a pending order is paid (40 %), cancelled (20 %) or left to
	// time out, a moment after its buyer sees it pending.
	doorCtx, stopDoor := context.WithCancel(ctx)
	doorDone := make(chan struct{})
	go func() {
		defer close(doorDone)
		var wg sync.WaitGroup
		defer wg.Wait()
		for doorCtx.Err() == nil {
			var rows []store.Order
			st.DB().Where("item_id = ? AND status = ?", it.ID, order.StatusPendingPayment).Find(&rows)
			for _, o := range rows {
				sale.mu.Lock()
				seen := sale.acted[o.OrderID]
				sale.acted[o.OrderID] = true
				sale.mu.Unlock()
				if seen {
					continue
				}
				h := int(o.UserID % 10)
				if h >= 6 {
					continue
				}
				wg.Go(func() {
					time.Sleep(time.Duration(o.UserID%5) * time.Second)
					verb := "pay"
					if h >= 4 {
						verb = "cancel"
					}
					code := act(verb, o.OrderID, o.UserID)
					if code == http.StatusOK {
						sale.mu.Lock()
						if verb == "pay" {
							sale.paid[o.OrderID] = true
						} else {
							sale.cancel[o.OrderID] = true
						}
						sale.mu.Unlock()
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
		}
	}()

	// The fault: Redis killed -9 and restarted once half the units are taken.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		sale.mu.Lock()
		n := len(sale.accepted)
		sale.mu.Unlock()
		if int64(n) >= units/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d orders accepted in 2 min: %v", n, sale.answers)
		}
		time.Sleep(20 * time.Millisecond)
	}
	away := rd.restart(2 * time.Second)
	t.Logf("redis killed -9 and restarted after %d purchases sent; away %s", sent.Load(), away.Round(time.Millisecond))

	// Drift planted while buyers buy: paid orders whose reservation Redis
	// lost (the reconcilers must put it back, once), and cancelled orders
	// whose release Redis lost (they must release it, once).
	lost, unreleased := plantDrift(t, st, tc, rdb, stk, it.ID, planted)

	<-buyersDone
	t.Logf("buyers done: %v", sale.answers)
	// Wait for every order to be final and the planted drift to be repaired
	// (the repairs wait for the grace), then stop the repairs.
	waitFor(t, 6*time.Minute, "every order final and the planted drift repaired", func() (bool, string) {
		var open int64
		st.DB().Model(&store.Order{}).Where("item_id = ? AND status IN ?", it.ID,
			[]order.Status{order.StatusQueued, order.StatusPendingPayment}).Count(&open)
		sale.mu.Lock()
		acc := len(sale.accepted)
		sale.mu.Unlock()
		var rows int64
		st.DB().Model(&store.Order{}).Where("item_id = ?", it.ID).Count(&rows)
		runs.mu.Lock()
		fixed := runs.repaired[reconcile.PaidUnitOnSale] + runs.repaired[reconcile.FinalUnitHeld]
		runs.mu.Unlock()
		fixed += int(workerRepairs(t, metricsAddr, reconcile.PaidUnitOnSale) + workerRepairs(t, metricsAddr, reconcile.FinalUnitHeld))
		return open == 0 && rows >= int64(acc) && fixed >= len(lost)+len(unreleased),
			fmt.Sprintf("%d open, %d rows for %d accepted, %d planted drifts repaired", open, rows, acc, fixed)
	})
	stopDoor()
	<-doorDone

	// Both checks, with the repairs still running: the invariant checker,
	// and an independent count.
	sale.mu.Lock()
	var accepted []invariant.Accepted
	for id, u := range sale.accepted {
		accepted = append(accepted, invariant.Accepted{OrderID: id, UserID: u})
	}
	sale.mu.Unlock()
	var rep invariant.Report
	waitFor(t, time.Minute, "the invariant checker clean", func() (bool, string) {
		var err error
		rep, err = invariant.Check(ctx, invariant.Deps{Store: st, Stock: stk,
			Workflows: snapshot.TemporalLister{Client: tc, Namespace: cfg.Temporal.Namespace}},
			invariant.Input{ItemID: it.ID, Accepted: accepted, AfterTimeouts: true})
		if err != nil {
			return false, err.Error()
		}
		return rep.OK(), fmt.Sprint(rep.Violations)
	})
	stopLoop()
	<-loopDone
	count := countIndependently(t, st, rdb, stk, it.ID)

	runs.mu.Lock()
	defer runs.mu.Unlock()
	twice := 0
	for k, n := range runs.orders {
		if n > 1 {
			twice++
			t.Errorf("repaired twice: %s (%d times)", k, n)
		}
	}
	for _, id := range lost {
		if runs.orders[reconcile.PaidUnitOnSale+" "+id] == 0 && workerRepairs(t, metricsAddr, reconcile.PaidUnitOnSale) == 0 {
			t.Errorf("planted lost reservation of %s not put back", id)
		}
	}
	workerKinds := map[string]float64{}
	for _, k := range reconcile.Kinds {
		if n := workerRepairs(t, metricsAddr, k); n > 0 {
			workerKinds[k] = n
		}
	}
	t.Logf("sale: %d units, %d buyers (%d purchases sent), %d s windows; answers %v", units, buyers, sent.Load(), window/time.Second, sale.answers)
	t.Logf("orders by status %v; paid at the door %d, cancelled at the door %d", rep.OrdersByStatus, len(sale.paid), len(sale.cancel))
	t.Logf("faults: redis kill -9 + restart (away %s); planted %d lost reservations %v and %d lost releases %v",
		away.Round(time.Millisecond), len(lost), lost, len(unreleased), unreleased)
	t.Logf("reconcile --repair CLI: %d runs (%d failed to run, e.g. while Redis was away); repaired %v; unrepaired findings %v",
		runs.runs, runs.errors, runs.repaired, runs.found)
	t.Logf("worker periodic repair (1 s): repairs %v", workerKinds)
	t.Logf("independent count: %s", count)
	t.Logf("invariant checker: clean (%d accepted, %d live, stock row %d, redis left %d); units given back twice: %d",
		rep.Accepted, rep.LiveOrders, rep.StockRow, rep.RedisLeft, twice)
	if rep.OrdersByStatus[string(order.StatusFailed)] != 0 {
		t.Fatalf("%d orders FAILED", rep.OrdersByStatus[string(order.StatusFailed)])
	}
}

// plantDrift makes Redis lose the reservations of n paid orders (the DECR
// kept, as if only the hash entry were lost) and the releases of n
// cancelled orders (reservation back, stock_left down), each in one script.
// Only orders whose sagas have closed are chosen: a saga still running (a
// loaded Temporal catching up) would release a planted reservation itself,
// leaving the reconcilers nothing to repair.
func plantDrift(t *testing.T, st *store.Store, tc client.Client, rdb *redis.Client, stk *stock.Store, itemID int64, n int) (lost, unreleased []string) {
	t.Helper()
	ctx := context.Background()
	k := stk.ItemKeys(itemID)
	closed := func(rows []store.Order) []store.Order {
		var out []store.Order
		for _, o := range rows {
			d, err := tc.DescribeWorkflow(ctx, "order-"+o.OrderID, "")
			if err == nil && d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && len(out) < n {
				out = append(out, o)
			}
		}
		return out
	}
	waitFor(t, 3*time.Minute, "orders to plant drift on", func() (bool, string) {
		var paid, cancelled []store.Order
		st.DB().Where("item_id = ? AND status = ?", itemID, order.StatusPaid).Limit(10 * n).Find(&paid)
		st.DB().Where("item_id = ? AND status = ? AND updated_at < ?", itemID, order.StatusCancelled,
			time.Now().UTC().Add(-20*time.Second)).Limit(10 * n).Find(&cancelled)
		paid, cancelled = closed(paid), closed(cancelled)
		if len(paid) < n || len(cancelled) < n {
			return false, fmt.Sprintf("%d paid, %d cancelled long enough ago, with their sagas closed", len(paid), len(cancelled))
		}
		for _, o := range paid {
			if rdb.HDel(ctx, k.Orders, o.OrderID).Val() == 1 {
				lost = append(lost, o.OrderID)
			}
		}
		relost := redis.NewScript(`if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 1 then redis.call('DECR', KEYS[2]) return 1 end return 0`)
		for _, o := range cancelled {
			m := order.Message{OrderID: o.OrderID, ItemID: itemID, UserID: o.UserID, ReservedAt: o.CreatedAt}
			if n, _ := relost.Run(ctx, rdb, []string{k.Orders, k.Stock}, o.OrderID, m.Encode()).Int(); n == 1 {
				unreleased = append(unreleased, o.OrderID)
			}
		}
		return true, ""
	})
	return lost, unreleased
}

// countIndependently counts units from MySQL and Redis directly (SQL and
// plain Redis commands, not the snapshot) and fails unless every unit is
// where it should be once every order is final: the stock row, stock_left
// and the unrestored deductions agree with the paid orders, nothing is
// FAILED, and no unpaid unit is held or given back twice.
func countIndependently(t *testing.T, st *store.Store, rdb *redis.Client, stk *stock.Store, itemID int64) string {
	t.Helper()
	ctx := context.Background()
	var total, row, unrestored int64
	db := st.DB()
	db.Raw("SELECT stock_total FROM item WHERE id = ?", itemID).Scan(&total)
	db.Raw("SELECT stock FROM stock WHERE item_id = ?", itemID).Scan(&row)
	db.Raw("SELECT COUNT(*) FROM stock_deduction WHERE item_id = ? AND restored = FALSE", itemID).Scan(&unrestored)
	var byStatus []struct {
		Status string
		N      int64
	}
	db.Raw("SELECT status, COUNT(*) AS n FROM seckill_order WHERE item_id = ? GROUP BY status", itemID).Scan(&byStatus)
	counts := map[string]int64{}
	for _, s := range byStatus {
		counts[s.Status] = s.N
	}
	k := stk.ItemKeys(itemID)
	left, err := rdb.Get(ctx, k.Stock).Int64()
	if err != nil {
		t.Fatal(err)
	}
	held := rdb.HLen(ctx, k.Orders).Val()
	paid := counts[string(order.StatusPaid)]
	var paidHeld int64
	for id := range rdb.HGetAll(ctx, k.Orders).Val() {
		var s string
		db.Raw("SELECT status FROM seckill_order WHERE order_id = ?", id).Scan(&s)
		if s == string(order.StatusPaid) {
			paidHeld++
		}
	}
	summary := fmt.Sprintf("S %d, paid %d, cancelled %d, failed %d, open %d; stock row %d, unrestored deductions %d; redis stock_left %d, reservations %d (%d of paid orders)",
		total, paid, counts[string(order.StatusCancelled)], counts[string(order.StatusFailed)],
		counts[string(order.StatusQueued)]+counts[string(order.StatusPendingPayment)], row, unrestored, left, held, paidHeld)
	if row != total-paid || unrestored != paid || left != total-paid || held != paid || paidHeld != paid ||
		counts[string(order.StatusFailed)] != 0 || counts[string(order.StatusQueued)]+counts[string(order.StatusPendingPayment)] != 0 {
		t.Fatalf("independent count disagrees: %s", summary)
	}
	return summary
}

// workerRepairs reads seckill_reconcile_repairs_total{kind} from the worker.
func workerRepairs(t *testing.T, addr, kind string) float64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0
	}
	defer func() { _ = res.Body.Close() }()
	sc := bufio.NewScanner(res.Body)
	prefix := `seckill_reconcile_repairs_total{kind="` + kind + `"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			var f float64
			_, _ = fmt.Sscan(v, &f)
			return f
		}
	}
	return 0
}

// waitFor polls cond until it holds, failing with its last word after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %s", what, within, why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
