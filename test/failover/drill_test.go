// The backup and recovery drill of docs/runbook.md ("Backups and recovery"),
// step by step as the runbook writes it, on real `seckill api` and `seckill
// worker` processes: a sale whose MySQL database is dumped mid-sale, more
// orders paid and cancelled, the database lost and restored from the dump;
// then the sale goes on and Redis loses every key of the deployment. Each
// recovery ends with the invariant checker, and every violation it still
// reports is one of the losses the test names (order id and kind): what a
// restore from a dump cannot bring back. MySQL is a database of this test's
// own on the shared MariaDB, Redis a key prefix of its own, so dropping them
// disturbs no one else:
//
//	flock /tmp/seckill-failover.lock env SECKILL_FAILOVER=1 go test ./test/failover/ -run BackupRestoreDrill -v

package failover_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

const drillSecret = "backup-drill-test-secret-32-bytes"

// drill is one deployment (an API and a worker process) on the test's own
// database, Redis prefix, topic and task queue.
type drill struct {
	t               *testing.T
	bin, dir        string
	env             []string
	mcfg            config.MySQL
	st              *store.Store
	rdb             redis.UniversalClient
	prefix          string
	stk             *stock.Store
	tc              client.Client
	ns              string
	item            int64
	apiURL, opsAddr string
	apiAddr         string
	api, worker     *child
	client          *apiclient.ClientWithResponses // of apiURL
	accepted        map[string]int64               // order id -> buyer, every 202
	nextBuyer       int64
	window          time.Duration
}

func newDrill(t *testing.T, units int64, window time.Duration) *drill {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := &drill{t: t, bin: testkit.SeckillBinary(t), dir: t.TempDir(), window: window, accepted: map[string]int64{},
		nextBuyer: time.Now().Unix()%1_000_000*1000 + 1}
	s := testkit.NewSlice(ctx, t)
	d.st, d.mcfg, d.rdb, d.stk = s.Store, s.Config.MySQL, s.Redis, s.Stock
	d.prefix, d.ns = s.Config.Redis.KeyPrefix, s.Config.Temporal.Namespace
	d.tc = s.Temporal(ctx, t, testkit.Logger(t))
	d.item = s.Sale(ctx, t, "backup drill", units, window).ID
	d.apiAddr, d.opsAddr = testkit.FreeAddr(t), testkit.FreeAddr(t)
	d.apiURL = "http://" + d.apiAddr
	d.client = testkit.Client(t, d.apiURL)
	d.env = s.Env(
		"SECKILL_JWT_SECRET="+drillSecret,
		"SECKILL_API_ADDR="+d.apiAddr,
		"SECKILL_WORKER_METRICS_ADDR="+d.opsAddr,
		"SECKILL_RECONCILE_INTERVAL=0", // the drill runs the reconciler when the runbook says
	)
	d.startWorker()
	d.startAPI()
	return d
}

func (d *drill) startAPI() {
	d.t.Helper()
	d.api = startChild(d.t, d.bin, filepath.Join(d.dir, "api.log"), "api "+time.Now().Format(time.RFC3339), d.env, "api")
	testkit.WaitHTTP(d.t, d.apiURL+"/healthz", d.api.Child, time.Minute)
}

func (d *drill) startWorker() {
	d.t.Helper()
	d.worker = startChild(d.t, d.bin, filepath.Join(d.dir, "worker.log"), "worker "+time.Now().Format(time.RFC3339), d.env, "worker")
	testkit.WaitHTTP(d.t, "http://"+d.opsAddr+"/metrics", d.worker.Child, time.Minute)
}

// stopRoles stops the API and the worker gracefully (SIGTERM), as a
// deployment scaled to zero: no door writes MySQL, no saga step runs.
func (d *drill) stopRoles() {
	d.t.Helper()
	for _, c := range []*child{d.api, d.worker} {
		c.Stop(30 * time.Second)
		if err := c.Err(); err != nil {
			d.t.Fatalf("a role exited with %v after SIGTERM", err)
		}
	}
}

// seckill runs `seckill args...` as an operator would and returns its
// standard output; a failure is fatal unless mayFail.
func (d *drill) seckill(mayFail bool, args ...string) []byte {
	d.t.Helper()
	cmd := exec.Command(d.bin, args...)
	cmd.Env = d.env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil && !mayFail {
		d.t.Fatalf("seckill %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return out
}

// reconcile runs `seckill reconcile` with args and --json, and logs what it
// found and did.
func (d *drill) reconcile(args ...string) reconcile.Report {
	d.t.Helper()
	out := d.seckill(true, append([]string{"reconcile", "--json"}, args...)...)
	var rep reconcile.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		d.t.Fatalf("seckill reconcile %v: %v\n%s", args, err, out)
	}
	for _, f := range rep.Findings {
		d.t.Logf("reconcile %v: %s %s repaired=%v: %s %s", args, f.Kind, f.OrderID, f.Repaired, f.Detail, f.Action)
	}
	if len(rep.Findings) == 0 {
		d.t.Logf("reconcile %v: no drift", args)
	}
	return rep
}

// as makes a call user's with role.
func (d *drill) as(user int64, role auth.Role) apiclient.RequestEditorFn {
	return testkit.As(d.t, []byte(drillSecret), user, role)
}

// buy makes n purchases by new buyers; each must be accepted.
func (d *drill) buy(n int) []string {
	d.t.Helper()
	var ids []string
	for range n {
		user := d.nextBuyer
		d.nextBuyer++
		r, err := d.client.PurchaseWithResponse(context.Background(), d.item, d.as(user, auth.RoleBuyer))
		if err := apiclient.Want(r, err, http.StatusAccepted); err != nil {
			d.t.Fatalf("purchase by %d: %v", user, err)
		}
		id := r.JSON202.OrderID
		d.accepted[id] = user
		ids = append(ids, id)
	}
	return ids
}

// act pays or cancels each order at the door; each must be answered 200.
func (d *drill) act(verb string, ids ...string) {
	d.t.Helper()
	act := map[string]func(context.Context, apiclient.OrderID, ...apiclient.RequestEditorFn) (*http.Response, error){
		"pay": d.client.PayOrder, "cancel": d.client.CancelOrder}[verb]
	for _, id := range ids {
		res, err := act(context.Background(), id, d.as(d.accepted[id], auth.RoleBuyer))
		if err != nil {
			d.t.Fatalf("%s %s: %v", verb, id, err)
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			d.t.Fatalf("%s %s: %d %s", verb, id, res.StatusCode, b)
		}
	}
}

func (d *drill) status(id string) order.Status {
	o, err := d.st.FindOrder(context.Background(), id)
	if err != nil {
		return ""
	}
	return o.Status
}

func (d *drill) waitStatus(want order.Status, ids ...string) {
	d.t.Helper()
	waitFor(d.t, time.Minute, fmt.Sprintf("%d orders %s", len(ids), want), func() (bool, string) {
		for _, id := range ids {
			if s := d.status(id); s != want {
				return false, id + " is " + string(s)
			}
		}
		return true, ""
	})
}

// sagaOpen reports whether the order's saga still runs.
func (d *drill) sagaOpen(id string) bool {
	desc, err := d.tc.DescribeWorkflow(context.Background(), workflows.WorkflowID(id), "")
	return err != nil || desc.RawResponse.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
}

// waitSagasClosed waits until every order's saga has closed.
func (d *drill) waitSagasClosed(within time.Duration, ids ...string) {
	d.t.Helper()
	waitFor(d.t, within, fmt.Sprintf("the sagas of %d orders closed", len(ids)), func() (bool, string) {
		for _, id := range ids {
			if d.sagaOpen(id) {
				return false, "saga of " + id + " still running"
			}
		}
		return true, ""
	})
}

// dump takes a consistent copy of the test's database, as the runbook's
// backup does.
func (d *drill) dump() string {
	d.t.Helper()
	path := filepath.Join(d.dir, "backup.sql")
	f, err := os.Create(path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	cmd := exec.Command("mariadb-dump", append(d.mysqlArgs(), "--single-transaction", d.mcfg.Database)...)
	cmd.Env = append(os.Environ(), "MYSQL_PWD="+d.mcfg.Password.Value())
	var stderr strings.Builder
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		d.t.Fatalf("mariadb-dump: %v\n%s", err, stderr.String())
	}
	return path
}

func (d *drill) mysqlArgs() []string {
	return []string{"-h", d.mcfg.Host, "-P", fmt.Sprint(d.mcfg.Port), "-u", d.mcfg.User}
}

// restore loses the database and loads the dump into a new one of the same
// name; the test's own connections are opened again.
func (d *drill) restore(path string) {
	d.t.Helper()
	sqlc := func(stdin io.Reader, args ...string) {
		cmd := exec.Command("mariadb", append(d.mysqlArgs(), args...)...)
		cmd.Env = append(os.Environ(), "MYSQL_PWD="+d.mcfg.Password.Value())
		cmd.Stdin = stdin
		if out, err := cmd.CombinedOutput(); err != nil {
			d.t.Fatalf("mariadb %v: %v\n%s", args, err, out)
		}
	}
	_ = d.st.Close()
	db := "`" + d.mcfg.Database + "`"
	sqlc(nil, "-e", "DROP DATABASE "+db+"; CREATE DATABASE "+db+" CHARACTER SET utf8mb4")
	f, err := os.Open(path)
	if err != nil {
		d.t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sqlc(bufio.NewReader(f), d.mcfg.Database)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if d.st, err = store.Open(ctx, d.mcfg); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { _ = d.st.Close() })
}

// loseRedis deletes every key of the deployment (its prefix): Redis lost
// with no AOF to restore.
func (d *drill) loseRedis() int {
	d.t.Helper()
	ctx := context.Background()
	n := 0
	del := func(ctx context.Context, c redis.UniversalClient) error {
		iter := c.Scan(ctx, 0, d.prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
			n++
		}
		return iter.Err()
	}
	var err error
	if cc, ok := d.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return del(ctx, c) })
	} else {
		err = del(ctx, d.rdb)
	}
	if err != nil {
		d.t.Fatal(err)
	}
	return n
}

// check runs the invariant checker over the item once every payment window
// has closed: every accepted order must be accounted for.
func (d *drill) check() invariant.Report {
	d.t.Helper()
	var acc []invariant.Accepted
	for id, u := range d.accepted {
		acc = append(acc, invariant.Accepted{OrderID: id, UserID: u})
	}
	rep, err := invariant.Check(context.Background(), invariant.Deps{Store: d.st, Stock: d.stk,
		Workflows: snapshot.TemporalLister{Client: d.tc, Namespace: d.ns}},
		invariant.Input{ItemID: d.item, Accepted: acc, AcceptedComplete: true, AfterTimeouts: true})
	if err != nil {
		d.t.Fatal(err)
	}
	return rep
}

// expectOnly waits until the checker reports exactly the violations want
// (name -> amount) and nothing else: visibility and the last compensations
// catch up within a few seconds.
func (d *drill) expectOnly(what string, want map[string]int64) invariant.Report {
	d.t.Helper()
	var rep invariant.Report
	waitFor(d.t, 30*time.Second, what+": the checker reports exactly the named losses", func() (bool, string) {
		rep = d.check()
		got := map[string]int64{}
		for _, v := range rep.Violations {
			got[v.Name] = v.Amount
		}
		if len(got) != len(want) {
			return false, fmt.Sprint(rep.Violations)
		}
		for n, a := range want {
			if g, ok := got[n]; !ok || g != a {
				return false, fmt.Sprint(rep.Violations)
			}
		}
		return true, ""
	})
	d.t.Logf("%s: checker orders by status %v, stock row %d, redis left %d, reservations %d; violations:",
		what, rep.OrdersByStatus, rep.StockRow, rep.RedisLeft, rep.RedisReservations)
	for _, v := range rep.Violations {
		d.t.Logf("  %s", v)
	}
	return rep
}

func TestBackupRestoreDrill(t *testing.T) {
	requireEnabled(t)
	const units = 40
	window := 12 * time.Second
	d := newDrill(t, units, window)
	start := time.Now()

	// Before the backup: 10 orders, 4 paid, 2 cancelled, 4 left open.
	before := d.buy(10)
	d.waitStatus(order.StatusPendingPayment, before...)
	paid1, cancelled1, open1 := before[:4], before[4:6], before[6:]
	d.act("pay", paid1...)
	d.act("cancel", cancelled1...)
	d.waitSagasClosed(time.Minute, before[:6]...)
	backup := d.dump()
	t.Logf("backup taken %s into the sale: %d orders (4 paid, 2 cancelled, 4 open)", time.Since(start).Round(time.Millisecond), len(before))

	// After the backup: 2 of the open ones paid; 10 new orders, 3 paid, 2
	// cancelled, 5 left open.
	paidLate := open1[:2]
	d.act("pay", paidLate...)
	after := d.buy(10)
	d.waitStatus(order.StatusPendingPayment, after...)
	paid2, cancelled2, open2 := after[:3], after[3:5], after[5:]
	d.act("pay", paid2...)
	d.act("cancel", cancelled2...)
	d.waitSagasClosed(time.Minute, slices.Concat(paidLate, paid2, cancelled2)...)

	// MySQL lost and restored from the backup, by the runbook's procedure.
	lostAt := time.Now()
	d.stopRoles()
	d.restore(backup)
	d.seckill(false, "migrate", "up")
	repaired := d.reconcile("--since", "24h", "--grace", "0s", "--repair")
	d.startWorker()
	d.startAPI()
	t.Logf("MySQL restored and the roles back in %s", time.Since(lostAt).Round(time.Millisecond))

	// What the restore lost, by kind; reconcile names each of them and
	// repairs nothing (there is nothing it can rebuild them from). The open
	// orders of after the backup are not lost: their sagas still run, and
	// at their deadline CloseOrder writes the missing row closed and gives
	// the unit back.
	lost := map[string]string{}
	for _, id := range paidLate { // PENDING_PAYMENT again, its saga completed PAID, the unit held
		lost[id] = reconcile.OpenOrderSagaClosed
	}
	for _, id := range slices.Concat(paid2, cancelled2) { // no row; Redis holds the unit of the paid ones
		lost[id] = reconcile.RowLost
	}
	named := map[string]string{}
	for _, f := range repaired.Findings {
		if f.Repaired {
			t.Errorf("reconcile repaired %s %s after the restore; the drill expects it to repair nothing", f.Kind, f.OrderID)
		}
		named[f.OrderID] = f.Kind
	}
	for id, kind := range lost {
		t.Logf("lost to the restore: %s (%s)", id, kind)
	}
	if !maps.Equal(named, lost) {
		t.Errorf("reconcile named %v, want exactly the losses %v", named, lost)
	}

	// Every payment window closes: the open orders of before and after the
	// backup are closed by their sagas.
	d.waitSagasClosed(2*time.Minute, slices.Concat(open1[2:], open2)...)
	for _, id := range slices.Concat(open1[2:], open2) {
		if s := d.status(id); s != order.StatusCancelled {
			t.Fatalf("open order %s ended %q, want CANCELLED by its own saga", id, s)
		}
	}
	rowLost := int64(len(paid2) + len(cancelled2))
	d.expectOnly("after the MySQL restore", map[string]int64{
		invariant.LostOrder:           rowLost,                           // the rows of paid2 and cancelled2
		invariant.UnitsSold:           -rowLost,                          // accepted, neither live nor released in MySQL
		invariant.PendingAfterTimeout: int64(len(paidLate)),              // paid after the backup, PENDING_PAYMENT again
		invariant.LeakedUnit:          int64(len(paidLate) + len(paid2)), // units held for payments MySQL does not know
	})

	// The sale goes on. An order bought while the consumer is held (its
	// saga waits) is paid at once at the door, and its event stream shows
	// the door's PAID, still settling, then PAID settled once the saga runs.
	if out := d.seckill(false, "consumer", "hold"); !strings.Contains(string(out), "held=true") {
		t.Fatalf("consumer hold: %s", out)
	}
	queued := d.buy(1)[0]
	events := d.stream(queued)
	if v := events.next(); v.Status != order.StatusQueued {
		t.Fatalf("first event of %s: %+v, want QUEUED", queued, v)
	}
	paidAt := time.Now()
	d.act("pay", queued)
	// The saga cannot run while the consumer is held: this PAID is the door's.
	if v := events.next(); v.Status != order.StatusPaid || !v.Settling {
		t.Fatalf("event after the pay of a QUEUED order: %+v, want PAID settling", v)
	}
	t.Logf("the event stream showed the door's PAID (settling) %s after the pay was sent", time.Since(paidAt).Round(time.Millisecond))
	if d.status(queued) == order.StatusPaid {
		t.Fatalf("order %s PAID in MySQL while its saga is held", queued)
	}
	if out := d.seckill(false, "consumer", "release"); !strings.Contains(string(out), "held=false") {
		t.Fatalf("consumer release: %s", out)
	}
	if v := events.next(); v.Status != order.StatusPaid || v.Settling {
		t.Fatalf("event after the saga ran: %+v, want PAID settled", v)
	}
	events.end()
	third := d.buy(4)
	d.waitStatus(order.StatusPendingPayment, third...)
	d.act("pay", third[:2]...)

	// Redis loses every key of the deployment while orders are open, and is
	// recovered by the runbook's procedure.
	lostAt = time.Now()
	d.stopRoles()
	keys := d.loseRedis()
	d.startAPI()
	warm, err := d.client.WarmupItemWithResponse(context.Background(), d.item, d.as(1, auth.RoleAdmin))
	if err := apiclient.Want(warm, err, http.StatusOK); err != nil {
		t.Fatalf("warmup: %v", err)
	}
	// The warm-up puts back the reservation of every order MySQL says holds
	// a unit before it counts: the paid ones of before the backup, the two
	// paid after it (PENDING_PAYMENT again), the order paid while queued,
	// and the third batch (2 paid, 2 open).
	held := len(paid1) + len(paidLate) + 1 + len(third)
	if n := d.rdb.HLen(context.Background(), d.stk.ItemKeys(d.item).Orders).Val(); n != int64(held) {
		t.Errorf("the warm-up put back %d reservations, want %d", n, held)
	}
	repaired = d.reconcile("--since", "24h", "--grace", "0s", "--repair")
	d.startWorker()
	t.Logf("Redis lost (%d keys) and recovered in %s", keys, time.Since(lostAt).Round(time.Millisecond))
	putBack, named := 0, map[string]string{}
	for _, f := range repaired.Findings {
		switch {
		case f.Kind == reconcile.PaidUnitOnSale && f.Repaired:
			putBack++
		case !f.Repaired:
			named[f.OrderID] = f.Kind
		}
	}
	// The warm-up left reconcile no reservation to put back. What it
	// cannot repair is the restore's losses, named again.
	if putBack != 0 {
		t.Errorf("reconcile put back %d reservations after the warm-up, want 0", putBack)
	}
	if !maps.Equal(named, lost) {
		t.Errorf("reconcile left %v unrepaired, want exactly the restore's losses %v", named, lost)
	}
	d.waitSagasClosed(2*time.Minute, third...)
	// Redis's loss took the units of paid2 with it: they are back on sale
	// (MySQL never had them) and only the orders' rows, lost to the MySQL
	// restore, name them. Nothing else is lost.
	d.expectOnly("after the Redis loss", map[string]int64{
		invariant.LostOrder:           rowLost,
		invariant.UnitsSold:           -rowLost,
		invariant.PendingAfterTimeout: int64(len(paidLate)),
		invariant.LeakedUnit:          int64(len(paidLate)),
	})
	t.Logf("drill done in %s", time.Since(start).Round(time.Second))
}

// events reads an order's event stream.
type events struct {
	t    *testing.T
	ch   chan order.View
	body io.Closer
}

func (d *drill) stream(id string) *events {
	d.t.Helper()
	// The generated client's stream call, not ...WithResponse (which reads
	// the whole stream), on an HTTP client with no timeout.
	sse, err := apiclient.NewClient(d.apiURL, apiclient.WithHTTPClient(&http.Client{}))
	if err != nil {
		d.t.Fatal(err)
	}
	res, err := sse.OrderEvents(context.Background(), id, d.as(d.accepted[id], auth.RoleBuyer))
	if err != nil {
		d.t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK {
		d.t.Fatalf("events of %s: %d", id, res.StatusCode)
	}
	e := &events{t: d.t, ch: make(chan order.View, 16), body: res.Body}
	go func() {
		defer close(e.ch)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				var v order.View
				if json.Unmarshal([]byte(data), &v) == nil {
					e.ch <- v
				}
			}
		}
	}()
	d.t.Cleanup(func() { _ = res.Body.Close() })
	return e
}

// next returns the stream's next status event (the door's decisions come at
// once; a saga's within seconds).
func (e *events) next() order.View {
	e.t.Helper()
	select {
	case v, ok := <-e.ch:
		if !ok {
			e.t.Fatal("the event stream ended")
		}
		return v
	case <-time.After(30 * time.Second):
		e.t.Fatal("no event within 30 s")
	}
	return order.View{}
}

// end checks that the stream ends after a settled status.
func (e *events) end() {
	e.t.Helper()
	select {
	case v, ok := <-e.ch:
		if ok {
			e.t.Fatalf("event after a settled status: %+v", v)
		}
	case <-time.After(10 * time.Second):
		e.t.Fatal("the stream did not end after a settled status")
	}
}
