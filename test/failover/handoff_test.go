// Handoff failure tests: the API process killed with SIGKILL mid-sale, and
// the RocketMQ broker stopped for a minute while buyers keep buying
// (TestBrokerOutage). Both stop shared services or processes, so they run
// only with SECKILL_FAILOVER=1, serially (make test does it in a separate
// step; by hand: flock /tmp/seckill-failover.lock env SECKILL_FAILOVER=1 go
// test ./test/failover/ -run 'Handoff|BrokerOutage' -v).

package failover_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/testkit"
)

const handoffSecret = "failover-test-secret-of-32-bytes!"

// handoffEnv is one sale on a private slice of the stack, served by child
// `seckill api` processes.
type handoffEnv struct {
	t      *testing.T
	bin    string
	env    []string
	stk    *stock.Store
	ob     *outbox.Stream
	rdb    redis.UniversalClient
	rmq    config.RocketMQ
	itemID int64
	logs   string
}

func newHandoffEnv(t *testing.T, units int64) *handoffEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	it := s.Sale(ctx, t, "failover", units, 15*time.Minute)
	env := s.Env(
		"SECKILL_JWT_SECRET="+handoffSecret,
		"SECKILL_API_GLOBAL_RPS=100000", "SECKILL_API_GLOBAL_BURST=100000",
		"SECKILL_API_BUYER_RPS=100", "SECKILL_API_BUYER_BURST=100",
		"SECKILL_API_RELAY_CLAIM_AFTER=2s", "SECKILL_API_RELAY_DISCOVER=500ms",
	)
	return &handoffEnv{t: t, bin: testkit.SeckillBinary(t), env: env, stk: s.Stock, ob: outbox.New(s.Redis, s.Config.Redis.KeyPrefix),
		rdb: s.Redis, rmq: s.Config.RocketMQ, itemID: it.ID, logs: filepath.Join(t.TempDir(), "api.log")}
}

type apiProc struct {
	*child
	url string
}

// startAPI runs `seckill api` on a free port and waits until it answers.
func (e *handoffEnv) startAPI(name string) *apiProc {
	e.t.Helper()
	addr := testkit.FreeAddr(e.t)
	env := append(append([]string{}, e.env...), "SECKILL_API_ADDR="+addr, "SECKILL_API_INSTANCE="+name)
	p := &apiProc{child: startChild(e.t, e.bin, e.logs, name+" on "+addr, env, "api"), url: "http://" + addr}
	testkit.WaitHTTP(e.t, p.url+"/healthz", p.Child, 30*time.Second)
	return p
}

// buyers fire purchases with distinct buyer ids at whatever API target()
// names, from workers goroutines, each waiting pause between requests.
type buyers struct {
	e       *handoffEnv
	target  atomic.Pointer[string]
	next    atomic.Int64
	counts  sync.Map // status code (0 = no answer) -> *atomic.Int64
	stop    chan struct{}
	wg      sync.WaitGroup
	client  *http.Client
	soldOut atomic.Bool
}

func (e *handoffEnv) startBuyers(url string, workers int, pause time.Duration) *buyers {
	b := &buyers{e: e, stop: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}}
	b.target.Store(&url)
	b.next.Store(1_000_000)
	for range workers {
		b.wg.Go(func() {
			for {
				select {
				case <-b.stop:
					return
				default:
				}
				b.buyOnce()
				if pause > 0 {
					time.Sleep(pause)
				}
			}
		})
	}
	return b
}

func (b *buyers) buyOnce() {
	user := b.next.Add(1)
	tok, _ := auth.Sign([]byte(handoffSecret), user, auth.RoleBuyer, time.Hour, time.Now())
	status := 0
	api, _ := apiclient.NewClient(*b.target.Load(), apiclient.WithHTTPClient(b.client)) // the target changes mid-sale
	if res, err := api.Purchase(context.Background(), b.e.itemID, apiclient.Bearer(tok)); err == nil {
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		status = res.StatusCode
	} else {
		time.Sleep(50 * time.Millisecond) // the instance is gone; do not spin
	}
	if status == http.StatusGone {
		b.soldOut.Store(true)
	}
	c, _ := b.counts.LoadOrStore(status, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
}

func (b *buyers) count(status int) int64 {
	if c, ok := b.counts.Load(status); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

func (b *buyers) snapshot() map[int]int64 {
	out := map[int]int64{}
	b.counts.Range(func(k, v any) bool { out[k.(int)] = v.(*atomic.Int64).Load(); return true })
	return out
}

func (b *buyers) halt() {
	close(b.stop)
	b.wg.Wait()
}

// reserved returns the order ids of every reserved unit (the buyer marks;
// nothing is released in these tests) after checking they match the
// reservation hash.
func (e *handoffEnv) reserved(ctx context.Context) map[string]bool {
	e.t.Helper()
	k := e.stk.ItemKeys(e.itemID)
	marks, err := e.rdb.HGetAll(ctx, k.Buyers).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	orders, err := e.rdb.HLen(ctx, k.Orders).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if int64(len(marks)) != orders {
		e.t.Fatalf("%d buyer marks but %d reservations", len(marks), orders)
	}
	left, _ := e.stk.Left(ctx, e.itemID)
	if left < 0 {
		e.t.Fatalf("stock went negative: %d", left)
	}
	out := make(map[string]bool, len(marks))
	for _, id := range marks {
		out[id] = true
	}
	return out
}

// consumeAll reads the topic from the start until every reserved order id
// has arrived (or timeout), lingers to catch duplicates, and returns the
// number of messages per order id.
func (e *handoffEnv) consumeAll(want map[string]bool, timeout time.Duration) map[string]int {
	e.t.Helper()
	var mu sync.Mutex
	got := map[string]int{}
	c, err := queue.NewConsumer(queue.ConsumerOptions{NameServers: e.rmq.NameServers,
		Group: testkit.Name(e.t, "cg"), Topic: e.rmq.Topic, FromFirstOffset: true, MaxReconsume: 16, Goroutines: 20, Log: testkit.Logger(e.t)},
		func(_ context.Context, m *primitive.MessageExt) error {
			om, err := order.DecodeMessage(m.Body)
			if err != nil {
				e.t.Errorf("bad message: %v", err)
				return nil
			}
			mu.Lock()
			got[om.OrderID]++
			mu.Unlock()
			return nil
		})
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	complete := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for id := range want {
			if got[id] == 0 {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(timeout)
	for !complete() && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	out := make(map[string]int, len(got))
	for k, v := range got {
		out[k] = v
	}
	return out
}

// verify: every reserved unit has a message and no message is a stranger.
// Duplicates are allowed up to the relay's bound: the sends in flight when a
// relay died, or when the broker went away with their replies
// (SECKILL_API_RELAY_PARALLEL x SECKILL_API_RELAY_SEND_BATCH per item).
func (e *handoffEnv) verify(reserved map[string]bool, got map[string]int) {
	e.t.Helper()
	missing, dups, strays := 0, 0, 0
	for id := range reserved {
		switch n := got[id]; {
		case n == 0:
			missing++
		case n > 1:
			dups += n - 1
		}
	}
	for id := range got {
		if !reserved[id] {
			strays++
		}
	}
	e.t.Logf("reserved units %d, distinct order ids on the topic %d, missing %d, duplicate messages %d, unknown ids %d",
		len(reserved), len(got), missing, dups, strays)
	if missing > 0 || strays > 0 {
		e.t.Fatalf("%d reserved units have no message; %d messages carry no reserved unit", missing, strays)
	}
	if len(got) != len(reserved) {
		e.t.Fatalf("%d distinct order ids on the topic, want %d", len(got), len(reserved))
	}
	api := testkit.Config(e.t).API
	if bound := api.Relay.Parallel * api.Relay.SendBatch; dups > bound {
		e.t.Fatalf("%d duplicate messages, more than the sends in flight can carry (%d)", dups, bound)
	}
}

func (e *handoffEnv) outboxLen(ctx context.Context) int64 {
	n, _ := e.ob.Len(ctx, e.itemID)
	return n
}

// The API killed -9 mid-sale with its relay's sends in flight: a new
// instance claims what the dead relay had read, every reserved unit reaches
// the topic, and the duplicates stay within the bound of the sends in flight.
// test/cluster's "kill -9 api-1" sale overlaps it but proves the claim by a
// live peer whose dead neighbour could not send at all, through the sagas to
// the invariant checker; only this test kills a relay mid-send and counts
// the messages, so both stay.
func TestHandoffSurvivesKill9MidSale(t *testing.T) {
	requireEnabled(t)
	const units = 400
	e := newHandoffEnv(t, units)
	ctx := context.Background()

	a := e.startAPI("kill9-a")
	b := e.startBuyers(a.url, 24, 0)
	// Kill once a good part of the stock is gone, while buyers still pour in.
	deadline := time.Now().Add(60 * time.Second)
	for b.count(http.StatusAccepted) < units/3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d purchases accepted in 60s: %v", b.count(http.StatusAccepted), b.snapshot())
		}
		time.Sleep(2 * time.Millisecond)
	}
	a.kill9(t)
	atKill := b.snapshot()
	pending := e.rdb.XPending(ctx, e.stk.ItemKeys(e.itemID).Outbox, "relay").Val()
	var pendingCount int64
	if pending != nil {
		pendingCount = pending.Count
	}
	t.Logf("SIGKILL after answers %v; outbox then held %d entries (%d delivered to the dead relay, unacked)",
		atKill, e.outboxLen(ctx), pendingCount)

	second := e.startAPI("kill9-b")
	b.target.Store(&second.url)
	deadline = time.Now().Add(90 * time.Second)
	for !b.soldOut.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("sale did not sell out: %v", b.snapshot())
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.halt()
	t.Logf("answers: %v", b.snapshot())

	reserved := e.reserved(ctx)
	if len(reserved) != units {
		t.Fatalf("%d units reserved, want all %d", len(reserved), units)
	}
	got := e.consumeAll(reserved, 90*time.Second)
	e.verify(reserved, got)
	if n := e.outboxLen(ctx); n != 0 {
		t.Fatalf("outbox still holds %d entries", n)
	}

	// Graceful stop of the survivor: SIGTERM, and it exits cleanly.
	_ = second.Signal(syscall.SIGTERM)
	second.exitsCleanly(t, "the surviving api")
}

func stackCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := runStack(testkit.RepoRoot(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scripts/stack %v: %s", args, lastLine(out))
}

func lastLine(b []byte) string {
	s := string(b)
	for len(s) > 0 && (s[len(s)-1] == '\n') {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}

// The broker stopped for a minute while buyers keep buying (one of
// TestBrokerOutage's two stories): every purchase is answered 202 or 410, the
// reservations wait in the outbox, and once the broker is back every reserved
// unit reaches the topic once.
func handoffThroughBrokerOutage(t *testing.T, p *party) {
	const units = 1500
	e := newHandoffEnv(t, units)
	ctx := context.Background()
	a := e.startAPI("outage")
	// The buyers start once the other test is ready too, outageLead before the stop.
	p.Ready()
	b := e.startBuyers(a.url, 4, 100*time.Millisecond) // ~35 purchases/s
	outageStart := p.Down()
	before := b.snapshot()
	var peak int64
	for waiting := true; waiting; {
		select {
		case <-p.o.Back():
			waiting = false
		case <-time.After(500 * time.Millisecond):
		}
		if n := e.outboxLen(ctx); n > peak {
			peak = n
		}
	}
	during := b.snapshot()
	outage := time.Since(outageStart).Round(time.Second)
	time.Sleep(5 * time.Second)
	b.halt()

	answered := map[int]int64{}
	for code, n := range during {
		answered[code] = n - before[code]
	}
	t.Logf("during the %v outage buyers got: %v; outbox backlog peak %d", outage, answered, peak)
	if answered[http.StatusAccepted]+answered[http.StatusGone] == 0 {
		t.Fatal("no purchase was answered while the broker was down")
	}
	for code, n := range answered {
		if n > 0 && code != http.StatusAccepted && code != http.StatusGone {
			t.Fatalf("%d answers with status %d during the outage", n, code)
		}
	}
	if peak == 0 {
		t.Fatal("the outbox never held a backlog: the outage did not bite")
	}

	reserved := e.reserved(ctx)
	drainStart := time.Now()
	got := e.consumeAll(reserved, 3*time.Minute)
	t.Logf("backlog drained and consumed %v after the broker came back", time.Since(drainStart).Round(time.Second))
	e.verify(reserved, got)
	if n := e.outboxLen(ctx); n != 0 {
		t.Fatalf("outbox still holds %d entries", n)
	}
}
