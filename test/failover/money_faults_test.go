// Network faults on the money path during a sale (issue 39, item 7; issue
// 40, items 2, 3 and 5), each judged by an independent count once the sale
// has settled. One `seckill testpay`, `seckill api` and `seckill worker`
// (SECKILL_PAYMENT_PROVIDER=testpay) serve every fault, each fault on a sale
// of its own: S units, 10×S buyers racing through the API, half of the
// buyers who got a 202 paying through the provider's checkout (checkout at
// the API, then the test card on the provider's JSON API, at a moment drawn
// within their window), a quarter checking out and never paying, a quarter
// doing nothing; the fault starts once half of the checkouts are answered.
// The faults are the kernel's (testkit.Nemesis), on the failover profile's
// MySQL port and on ports of this test's own children, never on the default
// stack's (docs/reliability.md):
//
//	set -a; eval "$(scripts/stack env --profile failover)"; SECKILL_STACK_PROFILE=failover SECKILL_FAILOVER=1 SECKILL_DEV=1; set +a
//	go test -count=1 -v -run TestMoneyUnderNetworkFaults ./test/failover/
//
// S is 300 (make test); SECKILL_MONEY_FAULT_UNITS=2000 runs the size.
// The roles' logs are kept in .stack/test-logs/money-faults/.

package failover_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/nemesis"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

const (
	moneyJWTSecret = "money-faults-test-secret-32-bytes"
	moneyTPSecret  = "whsec_money_faults_test"
)

// The buyers, and every call of this test to the API and the provider,
// come from a loopback address of their own; the roles (api, worker,
// testpay) connect from 127.0.0.1, the kernel's source address on lo. A
// fault narrowed to clients at 127.0.0.1 cuts the roles' links and not the
// buyers': the buyers keep reaching the provider's checkout while the shop
// cannot (a provider outage seen from the shop, not from the buyers'
// browsers), and the only client of the API at 127.0.0.1 is the provider
// notifying it.
var (
	buyersAddr = netip.MustParseAddr("127.0.0.3")
	rolesAddr  = netip.MustParseAddr("127.0.0.1")
)

// moneyFault is one fault of the table: held for hold from the moment half
// of the sale's checkouts are answered, while the buyers pay.
type moneyFault struct {
	name   string
	window time.Duration // the sale's payment window
	hold   time.Duration
	start  func(n *testkit.Nem, sh *moneyShop) *nemesis.Fault
}

func TestMoneyUnderNetworkFaults(t *testing.T) {
	requireEnabled(t)
	testkit.Nemesis(t) // skips, saying why, unless root with tc and ip
	units := int64(300)
	if s := os.Getenv("SECKILL_MONEY_FAULT_UNITS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			t.Fatalf("SECKILL_MONEY_FAULT_UNITS=%q: want a positive number of units", s)
		}
		units = n
	}
	sh := newMoneyShop(t)
	mysqlCut := func(n *testkit.Nem, sh *moneyShop) *nemesis.Fault { return n.Cut(nemesis.Ports(sh.mysqlPort)) }
	faults := []moneyFault{
		// The windows end while the fault holds: the case that refunded
		// buyers who had paid in time (issue 39, item 2).
		{"mysql-cut", 15 * time.Second, 30 * time.Second, mysqlCut},
		// The windows outlast the fault.
		{"mysql-cut", 60 * time.Second, 30 * time.Second, mysqlCut},
		// MySQL acts on every statement; its answers vanish.
		{"mysql-replies-lost", 15 * time.Second, 15 * time.Second,
			func(n *testkit.Nem, sh *moneyShop) *nemesis.Fault { return n.Replies(nemesis.Ports(sh.mysqlPort)) }},
		// The shop cannot reach the provider: the API's checkouts, the
		// worker's cancel-first and refunds fail; buyers still pay at its
		// checkout, and its notifications still reach the API.
		{"provider-unreachable", 15 * time.Second, 30 * time.Second,
			func(n *testkit.Nem, sh *moneyShop) *nemesis.Fault {
				return n.Cut(nemesis.Ports(sh.tpPort).Client(rolesAddr))
			}},
		// The provider's notifications never reach the API (testpay → API
		// only: the buyers' calls to the API come from buyersAddr); the
		// provider resends each for 31 s, then gives up.
		{"notifications-lost", 15 * time.Second, 30 * time.Second,
			func(n *testkit.Nem, sh *moneyShop) *nemesis.Fault {
				return n.Requests(nemesis.Ports(sh.apiPort).Client(rolesAddr))
			}},
	}
	var rows []string
	for _, f := range faults {
		t.Run(fmt.Sprintf("%s-%s_window-%s", f.name, f.hold, f.window), func(t *testing.T) {
			rows = append(rows, sh.sale(t, f, units))
		})
	}
	t.Logf("money under network faults (S = %d, 10×S buyers, half of the 202s paying):\n%s\n%s", units, moneyHeader, strings.Join(rows, "\n"))
}

const moneyHeader = "| fault | held | window | S | 202s | paid in time | PAID | CANCELLED | REFUNDED | refunds | settled after the heal | violations |\n" +
	"|---|---|---|---|---|---|---|---|---|---|---|---|"

// moneyShop is the deployment every fault's sale runs on: a slice of the
// failover profile's stack and its three roles as child processes.
type moneyShop struct {
	s                          *testkit.Slice
	tc                         client.Client
	api                        *apiclient.ClientWithResponses // from buyersAddr
	tp                         *testpay.Client                // from buyersAddr
	hc                         *http.Client                   // from buyersAddr
	apiURL                     string
	apiPort, tpPort, mysqlPort int
	logs                       string
	roles                      map[string]*proc.Child
	nextBuyer                  atomic.Int64
}

func newMoneyShop(t *testing.T) *moneyShop {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	// The faults drop packets of whole ports: never the default stack's,
	// which other people's tests use.
	if os.Getenv("SECKILL_STACK_PROFILE") != "failover" || s.Config.MySQL.Port == 3306 {
		t.Fatalf("refusing to fault MySQL at port %d: run on the failover profile's stack (SECKILL_STACK_PROFILE=failover and "+
			"the settings of scripts/stack env --profile failover)", s.Config.MySQL.Port)
	}
	apiAddr, tpAddr, workerAddr := lowFreeAddr(t), lowFreeAddr(t), testkit.FreeAddr(t)
	sh := &moneyShop{s: s, tc: s.Temporal(ctx, t, testkit.Logger(t)), apiURL: "http://" + apiAddr, mysqlPort: s.Config.MySQL.Port,
		apiPort: portOf(t, apiAddr), tpPort: portOf(t, tpAddr), roles: map[string]*proc.Child{},
		logs: filepath.Join(testkit.RepoRoot(t), ".stack", "test-logs", "money-faults")}
	sh.nextBuyer.Store(time.Now().Unix()%1_000_000*1_000_000 + 1)
	sh.hc = boundClient(buyersAddr, 256, 10*time.Second)
	var err error
	if sh.api, err = apiclient.NewClientWithResponses(sh.apiURL, apiclient.WithHTTPClient(sh.hc)); err != nil {
		t.Fatal(err)
	}
	tpURL := "http://" + tpAddr
	sh.tp = testpay.NewClient(tpURL, moneyTPSecret, sh.hc)
	if err := os.MkdirAll(sh.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	env := s.Env("SECKILL_DEV=1", "SECKILL_JWT_SECRET="+moneyJWTSecret, "SECKILL_PAYMENT_PROVIDER=testpay",
		"SECKILL_PAYMENT_TESTPAY_SECRET="+moneyTPSecret, "SECKILL_PAYMENT_TESTPAY_ADDR="+tpAddr, "SECKILL_PAYMENT_TESTPAY_URL="+tpURL,
		"SECKILL_PAYMENT_TESTPAY_NOTIFY_URL="+sh.apiURL+"/api/v1/payments/notifications",
		"SECKILL_API_ADDR="+apiAddr, "SECKILL_API_INSTANCE="+testkit.Name(t, "api"), "SECKILL_WORKER_METRICS_ADDR="+workerAddr,
		"SECKILL_API_GLOBAL_RPS=100000", "SECKILL_API_GLOBAL_BURST=100000", "SECKILL_API_IP_RPS=100000", "SECKILL_API_IP_BURST=100000",
		"SECKILL_API_BUYER_RPS=100", "SECKILL_API_BUYER_BURST=100")
	for _, r := range []struct{ role, health string }{{"testpay", tpURL}, {"worker", "http://" + workerAddr}, {"api", sh.apiURL}} {
		c := testkit.Start(t, proc.Spec{Path: testkit.SeckillBinary(t), Args: []string{r.role}, Env: env,
			Log: filepath.Join(sh.logs, r.role+".log"), Banner: "money faults " + r.role}, 20*time.Second)
		testkit.WaitHTTP(t, r.health+"/healthz", c, 90*time.Second)
		sh.roles[r.role] = c
	}
	return sh
}

// lowFreeAddr is a loopback address whose port, below the ephemeral range,
// was free a moment ago: a fault on it hits no client socket of another
// program, whose local ports come from that range.
func lowFreeAddr(t *testing.T) string {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		return addr
	}
	t.Fatal("no free port in 20000-31999 on 127.0.0.1")
	return ""
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return int(ap.Port())
}

// boundClient is an HTTP client whose connections come from the address from.
func boundClient(from netip.Addr, conns int, timeout time.Duration) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: timeout, Transport: &http.Transport{DialContext: d.DialContext,
		MaxIdleConns: 2 * conns, MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}}
}

func (sh *moneyShop) as(user int64) apiclient.RequestEditorFn {
	tok, _ := auth.Sign([]byte(moneyJWTSecret), user, auth.RoleBuyer, time.Hour, time.Now())
	return apiclient.Bearer(tok)
}

// What a buyer who got a 202 does.
const (
	planPay      = iota // checks out and pays with the test card
	planCheckout        // checks out and never pays
	planNothing
)

// moneyOrder is one 202 and what its buyer did.
type moneyOrder struct {
	id    string
	user  int64
	payBy time.Time // the 202's
	plan  int
	when  float64 // where in its window the buyer pays (0 to 1)

	// Set by its buyer, under moneySale.mu.
	firstAt    time.Time // the first checkout's answer
	paymentID  string
	checkedOut bool
	paid       bool   // the provider answered the card succeeded
	refused    string // why the buyer could not check out or pay
}

// moneySale is one fault's sale.
type moneySale struct {
	sh   *moneyShop
	t    *testing.T
	f    moneyFault
	item store.Item

	mu      sync.Mutex
	orders  map[string]*moneyOrder
	answers map[int]int // purchase answers by status (0: none)
	rnd     *rand.Rand
	checked sync.WaitGroup // every buyer's first checkout answered
	buyers  sync.WaitGroup // every buyer done
	// checkers counts the buyers who check out, answered those whose first
	// checkout was answered; halfChecked is closed once answered reaches
	// half (S×3/8: half of the S×3/4 who check out when every unit sells).
	checkers, answered atomic.Int64
	half               int64
	halfChecked        chan struct{}
	halfOnce           sync.Once
}

// firstAnswersAt counts the first checkouts answered before at.
func (sl *moneySale) firstAnswersAt(at time.Time) int {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	n := 0
	for _, o := range sl.orders {
		if !o.firstAt.IsZero() && o.firstAt.Before(at) {
			n++
		}
	}
	return n
}

// sale runs one fault's sale and judges it; it returns the table's row.
func (sh *moneyShop) sale(t *testing.T, f moneyFault, units int64) string {
	for name, c := range sh.roles {
		select {
		case <-c.Done():
			t.Fatalf("seckill %s exited: %v", name, c.Err())
		default:
		}
	}
	nem := testkit.Nemesis(t)
	ctx := context.Background()
	seed := uint64(time.Now().UnixNano())
	item, err := sh.s.Store.GetItem(ctx, sh.s.Sale(ctx, t, "money "+f.name, units, f.window).ID) // with the currency it took
	if err != nil {
		t.Fatal(err)
	}
	sl := &moneySale{sh: sh, t: t, f: f, item: item, orders: map[string]*moneyOrder{}, answers: map[int]int{},
		rnd: rand.New(rand.NewPCG(seed, seed>>1)), halfChecked: make(chan struct{}), half: max(units*3/8, 1)}
	notesBefore := sh.notifications()
	start := time.Now()
	var stampede time.Duration
	sold := make(chan struct{})
	go func() {
		defer close(sold)
		sl.stampede(ctx, 10*units)
		stampede = time.Since(start)
	}()
	// The fault starts once half of the buyers who check out have had
	// their first answer (the others check out under it), or once every
	// one has.
	select {
	case <-sl.halfChecked:
	case <-sold:
		waitGroup(&sl.checked, 20*time.Second)
	}
	fault := f.start(nem, sh)
	faultAt := time.Now()
	time.Sleep(f.hold)
	st, err := fault.Heal()
	if err != nil {
		t.Fatalf("heal %s: %v", fault, err)
	}
	healAt := time.Now()
	<-sold
	t.Logf("sale of %d units: %d attempts answered %v in %s; %s from %s into the sale (%d of %d checkouts answered), held %s, %d packets dropped",
		units, 10*units, sl.answers, stampede.Round(time.Millisecond), fault, faultAt.Sub(start).Round(time.Millisecond),
		sl.firstAnswersAt(faultAt), sl.checkers.Load(), st.Held.Round(time.Millisecond), st.Dropped)
	waitGroup(&sl.buyers, 2*time.Minute)
	settle := sl.waitSettled(healAt)
	t.Logf("settled %s after the heal (%s after the last pay_by); notifications judged since the sale began: %v",
		settle.Round(time.Second), time.Since(sl.lastPayBy()).Round(time.Second), diffCounts(sh.notifications(), notesBefore))
	return sl.judge(settle)
}

// waitGroup waits for wg, at most within.
func waitGroup(wg *sync.WaitGroup, within time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

// stampede fires n purchases by distinct buyers from 64 goroutines; every
// 202's buyer follows its plan in a goroutine of its own.
func (sl *moneySale) stampede(ctx context.Context, n int64) {
	users := make(chan int64)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for u := range users {
				sl.buy(ctx, u)
			}
		})
	}
	first := sl.sh.nextBuyer.Add(n) - n
	for i := range n {
		users <- first + i
	}
	close(users)
	wg.Wait()
}

func (sl *moneySale) buy(ctx context.Context, user int64) {
	res, err := sl.sh.api.PurchaseWithResponse(ctx, sl.item.ID, sl.sh.as(user))
	status := 0
	if err == nil {
		status = res.StatusCode()
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.answers[status]++
	if status != http.StatusAccepted || res.JSON202 == nil {
		return
	}
	o := &moneyOrder{id: res.JSON202.OrderID, user: user, payBy: res.JSON202.PayBy, when: sl.rnd.Float64()}
	switch len(sl.orders) % 4 {
	case 0, 2:
		o.plan = planPay
	case 1:
		o.plan = planCheckout
	default:
		o.plan = planNothing
	}
	sl.orders[o.id] = o
	if o.plan != planNothing {
		sl.checkers.Add(1)
		sl.checked.Add(1)
		sl.buyers.Add(1)
		go sl.follow(ctx, o)
	}
}

// follow is a buyer after the 202: checkout (again each second while it
// fails, until 3 s before pay_by), then, for a payer, the test card at a
// moment drawn within the window (again each half second while the
// provider cannot be reached, until 2 s before pay_by). Honest buyers: no
// pay is sent in the last 2 s of a window, so every success the provider
// confirms is in time by seconds.
func (sl *moneySale) follow(ctx context.Context, o *moneyOrder) {
	defer sl.buyers.Done()
	var once sync.Once
	checked := func() {
		once.Do(func() {
			sl.mu.Lock()
			o.firstAt = time.Now()
			sl.mu.Unlock()
			if sl.answered.Add(1) >= sl.half {
				sl.halfOnce.Do(func() { close(sl.halfChecked) })
			}
			sl.checked.Done()
		})
	}
	defer checked()
	refuse := func(why string) {
		sl.mu.Lock()
		o.refused = why
		sl.mu.Unlock()
	}
	lastCheckout := o.payBy.Add(-3 * time.Second)
	var co apiclient.Checkout
	for {
		res, err := sl.sh.api.CheckoutOrderWithResponse(ctx, o.id, sl.sh.as(o.user))
		checked()
		if err == nil && res.JSON200 != nil {
			co = *res.JSON200
			break
		}
		why := fmt.Sprint(err)
		if err == nil {
			why = fmt.Sprintf("%d %.200s", res.StatusCode(), res.Body)
			if res.StatusCode() == http.StatusConflict {
				refuse("checkout: " + why)
				return
			}
		}
		if time.Now().After(lastCheckout) {
			refuse("checkout: " + why)
			return
		}
		time.Sleep(time.Second)
	}
	sl.mu.Lock()
	o.paymentID, o.checkedOut = co.PaymentID, true
	sl.mu.Unlock()
	if o.plan != planPay {
		return
	}
	lastPay := o.payBy.Add(-2 * time.Second)
	if at := time.Now().Add(time.Duration(o.when * float64(time.Until(lastCheckout)))); at.After(time.Now()) {
		time.Sleep(time.Until(at))
	}
	if time.Now().After(lastPay) { // the checkout answered too late
		refuse("pay: too late, the checkout answered less than 2 s before pay_by")
		return
	}
	for {
		_, err := sl.sh.tp.Pay(ctx, co.PaymentID)
		if err == nil {
			sl.mu.Lock()
			o.paid = true
			sl.mu.Unlock()
			return
		}
		if !errors.Is(err, provider.ErrUnavailable) || time.Now().After(lastPay) {
			refuse("pay: " + err.Error())
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (sl *moneySale) lastPayBy() time.Time {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	var last time.Time
	for _, o := range sl.orders {
		if o.payBy.After(last) {
			last = o.payBy
		}
	}
	return last
}

// accepted are the sale's 202s.
func (sl *moneySale) accepted() []*moneyOrder {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	out := make([]*moneyOrder, 0, len(sl.orders))
	for _, o := range sl.orders {
		cp := *o
		out = append(out, &cp)
	}
	slices.SortFunc(out, func(a, b *moneyOrder) int { return strings.Compare(a.id, b.id) })
	return out
}

// waitSettled waits for the positive signal that the sale is over: every
// accepted order's row final (PAID, CANCELLED, REFUNDED or FAILED), no saga
// of the item running, no refund row unconfirmed. The bound: 3 minutes
// after the heal or the last window's close, whichever is later. It
// returns how long after the heal that was.
func (sl *moneySale) waitSettled(healAt time.Time) time.Duration {
	t := sl.t
	t.Helper()
	deadline := healAt
	if closeAt := sl.lastPayBy().Add(order.PayGrace); closeAt.After(deadline) {
		deadline = closeAt
	}
	deadline = deadline.Add(3 * time.Minute)
	for {
		ok, why := sl.settled()
		if ok {
			return time.Since(healAt)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sale did not settle within 3 minutes of the heal and the last window's close: %s", why)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (sl *moneySale) settled() (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	state, err := sl.sh.s.Store.ReadItemState(ctx, sl.item.ID)
	if err != nil {
		return false, err.Error()
	}
	rows := map[string]store.Order{}
	for _, r := range state.Orders {
		rows[r.OrderID] = r
	}
	var open []string
	for _, o := range sl.accepted() {
		switch r, ok := rows[o.id]; {
		case !ok:
			open = append(open, o.id+" has no row")
		case !r.Status.Final():
			open = append(open, o.id+" is "+string(r.Status))
		}
	}
	if len(open) > 0 {
		return false, fmt.Sprintf("%d accepted orders not final: %s", len(open), sample(open))
	}
	for _, r := range state.Refunds {
		if r.Status != store.RefundSucceeded {
			open = append(open, fmt.Sprintf("order %s's refund %s", r.OrderID, r.Status))
		}
	}
	if len(open) > 0 {
		return false, fmt.Sprintf("%d refunds not confirmed: %s", len(open), sample(open))
	}
	n, err := sl.sh.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: sl.sh.s.Config.Temporal.Namespace,
		Query: fmt.Sprintf("SeckillItemId = %d AND ExecutionStatus = 'Running'", sl.item.ID)})
	switch {
	case err != nil:
		return false, err.Error()
	case n.GetCount() > 0:
		return false, fmt.Sprintf("%d sagas still running", n.GetCount())
	}
	return true, ""
}

// sample lists up to five examples, sorted.
func sample(xs []string) string {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) > 5 {
		return strings.Join(s[:5], "; ") + fmt.Sprintf(" (+%d more)", len(s)-5)
	}
	return strings.Join(s, "; ")
}

// judge checks the settled sale with the invariant checker and with the
// test's own count from MySQL's rows, Redis and the provider's record, and
// returns the table's row.
func (sl *moneySale) judge(settle time.Duration) string {
	t := sl.t
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh, units := sl.sh, sl.item.StockTotal
	acc := sl.accepted()
	complete := sl.answers[0] == 0
	for code, n := range sl.answers {
		complete = complete && (code < 500 || n == 0)
	}

	// The invariant checker on the snapshot (stock, sagas and the books).
	in := invariant.Input{ItemID: sl.item.ID, AcceptedComplete: complete, SoldOutSeen: sl.answers[http.StatusGone] > 0,
		AfterTimeouts: true, RequirePayments: true} // every pay in this sale is a checkout's
	for _, o := range acc {
		in.Accepted = append(in.Accepted, invariant.Accepted{OrderID: o.id, UserID: o.user})
	}
	deps := invariant.Deps{Store: sh.s.Store, Stock: sh.s.Stock,
		Workflows: snapshot.TemporalLister{Client: sh.tc, Namespace: sh.s.Config.Temporal.Namespace}}
	var rep invariant.Report
	for range 5 { // visibility catches up with the last closes
		var err error
		if rep, err = invariant.Check(ctx, deps, in); err != nil {
			t.Fatal(err)
		}
		if rep.OK() {
			break
		}
		time.Sleep(2 * time.Second)
	}
	var bad []string // "kind: detail", each a violation
	for _, v := range rep.Violations {
		bad = append(bad, "checker "+v.String())
	}

	// The test's own count. MySQL: one consistent read of the item's rows.
	state, err := sh.s.Store.ReadItemState(ctx, sl.item.ID)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]store.Order{}
	byStatus := map[order.Status]int{}
	perUser := map[int64][]string{}
	for _, r := range state.Orders {
		rows[r.OrderID] = r
		byStatus[r.Status]++
		perUser[r.UserID] = append(perUser[r.UserID], r.OrderID)
	}
	paid := int64(byStatus[order.StatusPaid])
	// Redis: the units left, the reservations (order id -> body), the buyers' marks.
	keys := sh.s.Stock.ItemKeys(sl.item.ID)
	left, err := sh.s.Stock.Left(ctx, sl.item.ID)
	if err != nil {
		t.Fatal(err)
	}
	reserved, err := sh.s.Redis.HKeys(ctx, keys.Orders).Result()
	if err != nil {
		t.Fatal(err)
	}
	marks, err := sh.s.Redis.HGetAll(ctx, keys.Buyers).Result()
	if err != nil {
		t.Fatal(err)
	}
	// The provider's own record of every payment someone knows of (the
	// buyers' checkouts and the shop's rows), and of every refund the shop
	// recorded.
	payBy := map[string]time.Time{}
	ids := map[string]bool{}
	for _, o := range acc {
		payBy[o.id] = o.payBy
		if o.paymentID != "" {
			ids[o.paymentID] = true
		}
	}
	for _, p := range state.Payments {
		ids[p.ProviderPaymentID] = true
	}
	atProvider := map[string]provider.Payment{} // by payment id
	for id := range ids {
		p, err := sh.tp.Lookup(ctx, id)
		if err != nil {
			t.Fatalf("the provider's payment %s: %v", id, err)
		}
		atProvider[id] = p
	}
	refundedAt := map[string]provider.Refund{} // by payment id: confirmed by the provider
	var refunds int64
	for _, r := range state.Refunds {
		if r.ProviderRefundID == "" {
			continue
		}
		pr, err := sh.tp.LookupRefund(ctx, r.ProviderRefundID)
		if err != nil {
			t.Fatalf("the provider's refund %s of order %s: %v", r.ProviderRefundID, r.OrderID, err)
		}
		if pr.Status == provider.RefundSucceeded {
			if _, twice := refundedAt[pr.PaymentID]; twice {
				bad = append(bad, fmt.Sprintf("refunded twice: payment %s of order %s", pr.PaymentID, r.OrderID))
			}
			refundedAt[pr.PaymentID] = pr
			refunds++
		}
	}

	// 0 oversold, 0 leaked or lost units: after the sale only PAID orders
	// hold units, in the stock row and in Redis alike.
	if paid > units {
		bad = append(bad, fmt.Sprintf("oversold: %d PAID orders of %d units", paid, units))
	}
	if state.Stock.Stock != units-paid {
		bad = append(bad, fmt.Sprintf("stock row %d, want %d (%d units, %d PAID)", state.Stock.Stock, units-paid, units, paid))
	}
	if left != units-paid || int64(len(reserved)) != paid {
		bad = append(bad, fmt.Sprintf("Redis: %d left and %d reservations, want %d and %d", left, len(reserved), units-paid, paid))
	}
	for _, id := range reserved {
		if r := rows[id]; r.Status != order.StatusPaid {
			bad = append(bad, fmt.Sprintf("leaked unit: order %s holds a reservation and is %q", id, r.Status))
		}
	}
	// Every 202 has its order, final and its buyer's; no order without a
	// 202 (when every purchase was answered); no buyer with two.
	mine := map[string]bool{}
	for _, o := range acc {
		mine[o.id] = true
		switch r, ok := rows[o.id]; {
		case !ok:
			bad = append(bad, "lost order: "+o.id+" was accepted and has no row")
		case r.UserID != o.user:
			bad = append(bad, fmt.Sprintf("order %s is buyer %d's, the 202 was buyer %d's", o.id, r.UserID, o.user))
		case r.Status == order.StatusFailed:
			bad = append(bad, fmt.Sprintf("accepted order %s FAILED: %s", o.id, r.Reason))
		case !r.Status.Final():
			bad = append(bad, fmt.Sprintf("order %s is %s after the sale", o.id, r.Status))
		}
		if m := marks[strconv.FormatInt(o.user, 10)]; m != o.id {
			bad = append(bad, fmt.Sprintf("buyer %d's mark in Redis is %q, want their order %s", o.user, m, o.id))
		}
	}
	for id := range rows {
		if complete && !mine[id] {
			bad = append(bad, "phantom order: "+id+" has a row and no 202")
		}
	}
	for u, ids := range perUser {
		if len(ids) > 1 {
			bad = append(bad, fmt.Sprintf("duplicate buyer %d: orders %v", u, ids))
		}
	}

	// Money, by the provider's record. A payment that took money: its
	// order PAID by it, or its refund confirmed by the provider. One
	// confirmed before pay_by: its order PAID by it, never refunded. A PAID
	// order: its payment succeeded at the provider, of the item's price,
	// not refunded.
	paidBy := func(r store.Order, p provider.Payment) bool {
		return r.Status == order.StatusPaid && r.OrderID == p.OrderID && r.PaidAt != nil && r.PaidAt.Unix() == p.SucceededAt.Unix()
	}
	var inTime, captured, refunded int64
	paysOf := map[string][]provider.Payment{} // succeeded, by order id
	for id, p := range atProvider {
		if p.Status != provider.Succeeded {
			continue
		}
		captured += p.Amount
		paysOf[p.OrderID] = append(paysOf[p.OrderID], p)
		r, found := rows[p.OrderID]
		ref, back := refundedAt[id]
		if back {
			refunded += ref.Amount
			if ref.Amount != p.Amount {
				bad = append(bad, fmt.Sprintf("payment %s of order %s: %d taken, %d refunded", id, p.OrderID, p.Amount, ref.Amount))
			}
		}
		if pb, ok := payBy[p.OrderID]; ok && p.SucceededAt.Before(pb) {
			inTime++
			switch {
			case back:
				bad = append(bad, fmt.Sprintf("paid in time and refunded: order %s (%s, %s), payment %s succeeded %s, pay_by %s",
					p.OrderID, r.Status, r.Reason, id, p.SucceededAt.Format(time.TimeOnly), pb.Format("15:04:05.000")))
			case !found || !paidBy(r, p):
				bad = append(bad, fmt.Sprintf("paid in time and not PAID: order %s (%s, %s), payment %s succeeded %s, pay_by %s",
					p.OrderID, r.Status, r.Reason, id, p.SucceededAt.Format(time.TimeOnly), pb.Format("15:04:05.000")))
			}
		}
		if !back && !(found && paidBy(r, p)) {
			bad = append(bad, fmt.Sprintf("money kept without a unit: payment %s of order %s (%s, %s) succeeded %s, not refunded",
				id, p.OrderID, r.Status, r.Reason, p.SucceededAt.Format(time.TimeOnly)))
		}
	}
	for id, r := range rows {
		if r.Status != order.StatusPaid {
			continue
		}
		ok := false
		for _, p := range paysOf[id] {
			_, back := refundedAt[p.ID]
			ok = ok || paidBy(r, p) && !back && p.Amount == sl.item.PriceCents && p.Currency == sl.item.Currency
		}
		if !ok {
			bad = append(bad, fmt.Sprintf("unit kept without money: order %s PAID (paid_at %v) with no payment of %d %s it keeps at the provider",
				id, r.PaidAt, sl.item.PriceCents, sl.item.Currency))
		}
	}
	if captured-refunded != sl.item.PriceCents*paid {
		bad = append(bad, fmt.Sprintf("books: the provider captured %d and refunded %d, the %d PAID orders are worth %d",
			captured, refunded, paid, sl.item.PriceCents*paid))
	}
	// The shop's rows against the provider's record.
	for _, p := range state.Payments {
		pp := atProvider[p.ProviderPaymentID]
		took := p.Status == store.PaymentSucceeded || p.Status == store.PaymentMismatch
		if took != (pp.Status == provider.Succeeded) {
			bad = append(bad, fmt.Sprintf("payment %s of order %s: %s in the shop's row, %s at the provider", p.ProviderPaymentID, p.OrderID, p.Status, pp.Status))
		}
	}
	// The buyers' word: every card the provider answered succeeded is a
	// success in its record.
	var cards, refused int
	for _, o := range acc {
		if o.paid {
			cards++
			if p := atProvider[o.paymentID]; p.Status != provider.Succeeded {
				bad = append(bad, fmt.Sprintf("order %s: the card was answered succeeded, the provider says %s", o.id, p.Status))
			}
		}
		if o.refused != "" && o.plan != planNothing {
			refused++
		}
	}

	row := fmt.Sprintf("| %s | %s | %s | %d | %d | %d | %d | %d | %d | %d | %s | %d |", sl.f.name, sl.f.hold, sl.f.window, units, len(acc),
		inTime, paid, byStatus[order.StatusCancelled], byStatus[order.StatusRefunded], refunds, settle.Round(time.Second), len(bad))
	t.Logf("counts: %d cards answered succeeded, %d buyers could not check out or pay (%s); checker: orders %v, money %+v",
		cards, refused, sl.refusals(), rep.OrdersByStatus, rep.Money)
	t.Logf("\n%s\n%s", moneyHeader, row)
	for _, b := range bad {
		t.Errorf("violation: %s", b)
	}
	if len(bad) > 0 {
		sh.evidence(t, bad)
	}
	return row
}

// refusals counts the buyers' refusals by what they said, ids left out.
func (sl *moneySale) refusals() string {
	n := map[string]int{}
	for _, o := range sl.accepted() {
		if o.refused != "" && o.plan != planNothing {
			why := idsPattern.ReplaceAllString(o.refused, "…")
			if len(why) > 120 {
				why = why[:120]
			}
			n[why]++
		}
	}
	return fmt.Sprint(n)
}

var idsPattern = regexp.MustCompile(`[0-9A-HJKMNP-TV-Z]{26}|pi_test_\w+|127\.0\.0\.\d+:\d+`)

var orderIDPattern = regexp.MustCompile(`\b[0-9A-HJKMNP-TV-Z]{26}\b`)

// evidence logs what the roles' logs say of the first orders the
// violations name.
func (sh *moneyShop) evidence(t *testing.T, bad []string) {
	t.Helper()
	seen := map[string]bool{}
	var ids []string
	for _, b := range bad {
		for _, id := range orderIDPattern.FindAllString(b, -1) {
			if !seen[id] && len(ids) < 3 {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		for _, role := range []string{"api", "worker", "testpay"} {
			lines := grepFile(filepath.Join(sh.logs, role+".log"), id, 20)
			if len(lines) > 0 {
				t.Logf("%s.log on order %s:\n%s", role, id, strings.Join(lines, "\n"))
			}
		}
	}
	t.Logf("the roles' logs: %s", sh.logs)
}

func grepFile(path, s string, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(out) < max {
		if strings.Contains(sc.Text(), s) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// notifications are the API's notification counts by outcome.
func (sh *moneyShop) notifications() map[string]int {
	n := map[string]int{}
	res, err := sh.hc.Get(sh.apiURL + "/metrics")
	if err != nil {
		return n
	}
	defer func() { _ = res.Body.Close() }()
	b, _ := io.ReadAll(res.Body)
	for _, m := range notifiedPattern.FindAllStringSubmatch(string(b), -1) {
		n[m[1]], _ = strconv.Atoi(m[2])
	}
	return n
}

var notifiedPattern = regexp.MustCompile(`(?m)^seckill_payment_notifications_total\{outcome="(\w+)"\} (\d+)$`)

func diffCounts(after, before map[string]int) map[string]int {
	d := map[string]int{}
	for k, v := range after {
		if v != before[k] {
			d[k] = v - before[k]
		}
	}
	return d
}
