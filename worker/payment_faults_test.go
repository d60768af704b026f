package worker_test

// Faults of payments (issue 29, item 8) on the real services, the test
// provider in process: the provider unreachable for 60 s during the pay
// burst, and notifications delayed past pay_by. (A refund failing 10 times
// then succeeding is TestPaymentRefundedAfterClose.) They hurt only the
// link between this test's shop and its provider, so they run in parallel
// with the rest.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/workflows"
)

// link is the network between the shop and the test provider: while it is
// down every call to the provider fails as a refused connection does
// (provider.ErrUnavailable), and every notification fails to connect (the
// provider resends it). It notes each notification the shop answered with
// its verdict, and counts the refund calls and what they answered.
type link struct {
	down     atomic.Bool
	mu       sync.Mutex
	notes    []note
	failures int                        // notification sends not answered 2xx
	calls    map[string]int             // provider payment id -> refund calls
	failed   map[string]int             // provider payment id -> refund calls that failed
	refunds  map[string]map[string]bool // provider payment id -> refund ids the provider answered
}

func newLink() *link {
	return &link{calls: map[string]int{}, failed: map[string]int{}, refunds: map[string]map[string]bool{}}
}

var errLinkDown = errors.New("connection refused: the link to the provider is down")

// note is a notification the shop answered 2xx.
type note struct {
	event, payment string
	created        time.Time // the provider's timestamp
	outcome        string    // the shop's verdict
	at             time.Time // when it was answered
}

// RoundTrip carries the provider's notifications to the shop and notes
// the answers.
func (l *link) RoundTrip(r *http.Request) (*http.Response, error) {
	var res *http.Response
	err := errLinkDown
	if !l.down.Load() {
		res, err = http.DefaultTransport.RoundTrip(r)
	}
	if err != nil || res.StatusCode/100 != 2 {
		l.mu.Lock()
		l.failures++
		l.mu.Unlock()
		return res, err
	}
	var e provider.StripeEvent
	if body, gerr := r.GetBody(); gerr == nil {
		_ = json.NewDecoder(body).Decode(&e)
	}
	answer, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	res.Body = io.NopCloser(bytes.NewReader(answer))
	var a struct {
		Outcome string `json:"outcome"`
	}
	_ = json.Unmarshal(answer, &a)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.notes = append(l.notes, note{event: e.ID, payment: e.Data.Object.ID, created: time.Unix(e.Created, 0), outcome: a.Outcome, at: time.Now()})
	return res, nil
}

// notesOf are the answered notifications of a payment.
func (l *link) notesOf(paymentID string) []note {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []note
	for _, n := range l.notes {
		if n.payment == paymentID {
			out = append(out, n)
		}
	}
	return out
}

func (l *link) sendFailures() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failures
}

func (l *link) noteRefund(paymentID string, r provider.Refund, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls[paymentID]++
	switch {
	case err != nil:
		l.failed[paymentID]++
	case l.refunds[paymentID] == nil:
		l.refunds[paymentID] = map[string]bool{r.ID: true}
	default:
		l.refunds[paymentID][r.ID] = true
	}
}

// refundsOf are the refund calls for a payment, the failed ones, and the
// refund ids the provider answered.
func (l *link) refundsOf(paymentID string) (calls, failed int, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id := range l.refunds[paymentID] {
		ids = append(ids, id)
	}
	return l.calls[paymentID], l.failed[paymentID], ids
}

// through makes a call to the provider over the link.
func through[T any](l *link, op, id string, call func() (T, error)) (T, error) {
	if l.down.Load() {
		var zero T
		return zero, fmt.Errorf("testpay %s %s: %w: %w", op, id, provider.ErrUnavailable, errLinkDown)
	}
	return call()
}

// linked is the provider as the shop reaches it: over the link.
type linked struct {
	*testpay.Provider
	l *link
}

func (p linked) Create(ctx context.Context, r provider.Request) (provider.Payment, error) {
	return through(p.l, "create", r.OrderID, func() (provider.Payment, error) { return p.Provider.Create(ctx, r) })
}

func (p linked) Lookup(ctx context.Context, id string) (provider.Payment, error) {
	return through(p.l, "lookup", id, func() (provider.Payment, error) { return p.Provider.Lookup(ctx, id) })
}

func (p linked) Cancel(ctx context.Context, id string) (provider.Payment, error) {
	return through(p.l, "cancel", id, func() (provider.Payment, error) { return p.Provider.Cancel(ctx, id) })
}

func (p linked) Refund(ctx context.Context, id, key string) (provider.Refund, error) {
	r, err := through(p.l, "refund", id, func() (provider.Refund, error) { return p.Provider.Refund(ctx, id, key) })
	p.l.noteRefund(id, r, err)
	return r, err
}

// group is a part of a burst's buyers who do the same and end alike.
type group struct {
	name string
	n    int
	want order.Status // the order's end
	paid bool         // they pay (the test card), in time
	// quiet: their notifications are held past the test (Delay knob), so
	// only the saga's cancel tells the shop of their payments.
	quiet bool
	ms    []order.Message
}

func paidInTime(n int) *group {
	return &group{name: "paid in time", n: n, want: order.StatusPaid, paid: true}
}
func paidThenCanceled(n int) *group {
	return &group{name: "paid, then canceled by the buyer", n: n, want: order.StatusRefunded, paid: true}
}
func neverPaid(n int) *group { return &group{name: "never paid", n: n, want: order.StatusCancelled} }

// payBurst is a sale of one unit per buyer: every buyer's order is
// PENDING_PAYMENT and checked out before the test acts group by group.
type payBurst struct {
	*paySlice
	item   store.Item
	groups []*group
	pays   map[string]cashier.Checkout // by order id
}

func newPayBurst(ps *paySlice, window time.Duration, groups ...*group) *payBurst {
	ps.t.Helper()
	b := &payBurst{paySlice: ps, groups: groups, pays: map[string]cashier.Checkout{}}
	var units int64
	for _, g := range groups {
		units += int64(g.n)
	}
	b.item = ps.item(units, window)
	start := time.Now()
	user := int64(8000)
	for _, g := range groups {
		for range g.n {
			user++
			g.ms = append(g.ms, ps.buy(b.item.ID, user))
		}
	}
	for _, g := range groups {
		for _, m := range g.ms {
			ps.waitStatus(m.OrderID, order.StatusPendingPayment, 60*time.Second)
			b.pays[m.OrderID] = ps.checkout(m)
		}
	}
	ps.t.Logf("%d orders PENDING_PAYMENT and checked out in %s", units, time.Since(start).Round(time.Millisecond))
	return b
}

// pay pays every order of g with the test card at the provider (the
// buyer's browser reaches it whatever the link does).
func (b *payBurst) pay(g *group) {
	b.t.Helper()
	for _, m := range g.ms {
		if _, err := b.tp.Pay(context.Background(), b.pays[m.OrderID].PaymentID); err != nil {
			b.t.Fatalf("%s: the test card on order %s (pay_by %s): %v — the set-up outran the payment window",
				g.name, m.OrderID, m.PayBy.Format(time.RFC3339), err)
		}
	}
}

// cancel is each buyer of g canceling at the door.
func (b *payBurst) cancel(g *group) {
	b.t.Helper()
	for _, m := range g.ms {
		if v, err := b.paySlice.cancel(m); err != nil || v.Status != order.StatusCancelled {
			b.t.Fatalf("%s: cancel of %s: %+v %v", g.name, m.OrderID, v, err)
		}
	}
}

// wantHeld fails the test unless only released units are back, in Redis
// and in the stock row, and no order of the groups undecided was decided.
func (b *payBurst) wantHeld(released int64, undecided ...*group) {
	b.t.Helper()
	b.wantLeft(b.item.ID, released)
	b.wantStock(b.item.ID, released)
	for _, g := range undecided {
		for _, m := range g.ms {
			if row, err := b.st.FindOrder(context.Background(), m.OrderID); err != nil || row.Status != order.StatusPendingPayment {
				b.t.Fatalf("%s: order %s decided without the provider: %+v %v", g.name, m.OrderID, row, err)
			}
		}
	}
}

// settle waits until every order has its end, its saga closed, every
// notification not held back judged, and every payment refund workflow
// those started done.
func (b *payBurst) settle(within time.Duration) {
	b.t.Helper()
	for _, g := range b.groups {
		for _, m := range g.ms {
			b.waitStatus(m.OrderID, g.want, within)
			b.waitWorkflowClosed(m.OrderID, within)
			if !g.paid || g.quiet {
				continue
			}
			id := b.pays[m.OrderID].PaymentID
			waitFor(b.t, within, "the notification of payment "+id+" answered", func() bool { return len(b.link.notesOf(id)) > 0 })
			for _, n := range b.link.notesOf(id) {
				if n.outcome == string(store.VerdictNotPayable) || n.outcome == string(store.VerdictLate) {
					b.waitWorkflowID(workflows.RefundWorkflowID(id), within)
				}
			}
		}
	}
}

// check proves the burst's books: every payment applied exactly once,
// nothing paid in time refused, one refund per refund due and none else,
// and the invariant checker finds no violation.
func (b *payBurst) check() {
	b.t.Helper()
	ctx := context.Background()
	var paid, deliveries, events int
	for _, g := range b.groups {
		for _, m := range g.ms {
			c := b.pays[m.OrderID]
			row, err := b.st.FindOrder(ctx, m.OrderID)
			if err != nil || row.Status != g.want {
				b.t.Fatalf("%s: order %+v %v, want %s", g.name, row, err, g.want)
			}
			p := b.payment(m.OrderID)
			switch {
			case !g.paid && p.Status != store.PaymentCanceled:
				b.t.Fatalf("%s: payment %+v, want canceled", g.name, p)
			case g.paid && (p.Status != store.PaymentSucceeded || p.SucceededAt == nil || !p.SucceededAt.Before(p.PayBy)):
				b.t.Fatalf("%s: payment %+v, want succeeded before pay_by", g.name, p)
			case g.want == order.StatusPaid && (row.PaidAt == nil || !row.PaidAt.Equal(*p.SucceededAt)):
				b.t.Fatalf("%s: order %s paid at %v, its payment succeeded at %v", g.name, m.OrderID, row.PaidAt, p.SucceededAt)
			}
			if g.want == order.StatusPaid {
				paid++
			}
			b.checkNotes(g, p)
			ns := b.link.notesOf(c.PaymentID)
			deliveries += len(ns)
			events += countEvents(ns)
			b.checkRefunds(g, m.OrderID, c.PaymentID)
		}
	}
	b.t.Logf("%d notifications delivered, %d events, %d orders PAID", deliveries, events, paid)
	left := b.item.StockTotal - int64(paid)
	b.wantLeft(b.item.ID, left)
	b.wantStock(b.item.ID, left)
	b.invariants()
}

// checkNotes: each event decided once (its resends and duplicates
// repeated) and recorded once in payment_events, late only if the provider
// timestamped it at or after pay_by, and an in-time success never refused.
// (An answer lost to a killed API leaves only its resends, repeated.)
func (b *payBurst) checkNotes(g *group, p store.Payment) {
	b.t.Helper()
	decided := map[string]int{}
	for _, n := range b.link.notesOf(p.ProviderPaymentID) {
		if n.outcome == string(store.VerdictRepeated) {
			decided[n.event] += 0 // seen: its payment_events row is checked below
			continue
		}
		decided[n.event]++
		if late := !n.created.Before(p.PayBy); (n.outcome == string(store.VerdictLate)) != late {
			b.t.Fatalf("%s: event %s timestamped %s (pay_by %s) judged %s", g.name, n.event, n.created, p.PayBy, n.outcome)
		}
		ok := n.outcome == string(store.VerdictPaid) || n.outcome == string(store.VerdictAlreadyPaid)
		switch {
		case !g.paid: // a cancel's notification
			ok = n.outcome == string(store.VerdictRecorded)
		case g.want != order.StatusPaid:
			ok = n.outcome == string(store.VerdictNotPayable)
		}
		if !ok {
			b.t.Fatalf("%s: event %s of payment %s judged %q at %s", g.name, n.event, p.ProviderPaymentID, n.outcome, n.at)
		}
	}
	for ev, n := range decided {
		var rows int64
		if err := b.st.DB().Table("payment_events").Where("event_id = ?", ev).Count(&rows).Error; err != nil || n > 1 || rows != 1 {
			b.t.Fatalf("%s: event %s decided %d times, %d payment_events rows (%v)", g.name, ev, n, rows, err)
		}
	}
}

func countEvents(ns []note) int {
	seen := map[string]bool{}
	for _, n := range ns {
		seen[n.event] = true
	}
	return len(seen)
}

// checkRefunds: a REFUNDED order's payment was refunded exactly once at the
// provider, its refund row names that refund; no other payment was refunded.
func (b *payBurst) checkRefunds(g *group, orderID, paymentID string) {
	b.t.Helper()
	rs := b.refunds(orderID)
	_, _, ids := b.link.refundsOf(paymentID)
	if g.want != order.StatusRefunded {
		if len(rs) != 0 || len(ids) != 0 {
			b.t.Fatalf("%s: order %s refunded: rows %+v, at the provider %v", g.name, orderID, rs, ids)
		}
		return
	}
	if len(ids) != 1 || len(rs) != 1 || rs[0].Status != store.RefundSucceeded || rs[0].ProviderRefundID != ids[0] {
		b.t.Fatalf("%s: order %s: refund rows %+v, refunds at the provider %v, want one", g.name, orderID, rs, ids)
	}
}

// invariants runs the checker the bench uses over the item (MySQL, Redis,
// Temporal) with every order answered 202 and every window closed.
func (b *payBurst) invariants() {
	b.t.Helper()
	var acc []invariant.Accepted
	for _, g := range b.groups {
		for _, m := range g.ms {
			acc = append(acc, invariant.Accepted{OrderID: m.OrderID, UserID: m.UserID})
		}
	}
	deps := invariant.Deps{Store: b.st, Stock: b.stk, Workflows: snapshot.TemporalLister{Client: b.tc, Namespace: b.cfg.Temporal.Namespace}}
	in := invariant.Input{ItemID: b.item.ID, Accepted: acc, AcceptedComplete: true, AfterTimeouts: true}
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep, err := invariant.Check(context.Background(), deps, in)
		if err == nil && rep.OK() {
			b.t.Logf("invariants: no violation (%v)", rep.OrdersByStatus)
			return
		}
		if time.Now().After(deadline) { // visibility catches up with the last closes meanwhile
			b.t.Fatalf("invariants: %v %v", rep.Violations, err)
		}
		time.Sleep(time.Second)
	}
}

// providerOutage is how long the provider stays unreachable (the issue's
// 60 s). It starts at most outageLead before pay_by, once the orders are
// ready, so every pay_by falls inside it: the payment window leaves the
// set-up up to outageWindow - 10 s on a busy box.
const (
	providerOutage = 60 * time.Second
	outageLead     = 50 * time.Second
	outageWindow   = 70 * time.Second
)

// The provider is unreachable for 60 s during the pay burst: buyers pay at
// its checkout (their browsers reach it) but the shop can neither hear its
// notifications nor ask it anything. Nothing is decided and no unit goes
// back meanwhile — not even for a buyer's cancel, whose saga must cancel
// the payment first. Once it is back the notifications, resent, arrive
// after pay_by but are judged by the provider's timestamp: every payment
// made in time pays its order, once. Refunds due before the outage (the
// provider refusing them until it starts) fail through it and are retried
// until they succeed, each once.
func TestPaymentProviderUnreachable(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	inTime, canceled, unpaid := paidInTime(8), paidThenCanceled(3), neverPaid(2)
	refunding := paidThenCanceled(2)
	refunding.name, refunding.quiet = "paid and canceled before the outage, refund failing", true
	b := newPayBurst(ps, outageWindow, inTime, canceled, unpaid, refunding)

	ps.tp.SetKnobs(testpay.Knobs{Delay: time.Hour, FailRefunds: math.MaxInt32})
	b.pay(refunding)
	b.cancel(refunding)
	for _, m := range refunding.ms { // each saga is retrying its refund
		id := b.pays[m.OrderID].PaymentID
		waitFor(t, time.Minute, "a refund call for "+id, func() bool { calls, _, _ := ps.link.refundsOf(id); return calls > 0 })
	}
	payBy := *inTime.ms[0].PayBy
	time.Sleep(time.Until(payBy.Add(-outageLead)))
	if left := time.Until(payBy); left < 10*time.Second {
		t.Fatalf("the set-up outran the payment window: %s left before pay_by", left)
	}

	ps.link.down.Store(true)
	back := time.Now().Add(providerOutage)
	t.Logf("provider unreachable for %s, %s before pay_by", providerOutage, time.Until(payBy).Round(time.Second))
	ps.tp.SetKnobs(testpay.Knobs{}) // the refunds now fail on the link
	b.pay(inTime)
	b.pay(canceled)
	b.cancel(canceled)
	time.Sleep(time.Until(back))                   // the outage itself
	b.wantHeld(int64(refunding.n), inTime, unpaid) // released before the outage: the refunding group's units
	ps.link.down.Store(false)

	b.settle(3 * time.Minute)
	b.check()
	for _, m := range refunding.ms {
		calls, failed, _ := ps.link.refundsOf(b.pays[m.OrderID].PaymentID)
		if failed == 0 || calls <= failed {
			t.Fatalf("refund of %s: %d calls, %d failed", m.OrderID, calls, failed)
		}
		t.Logf("refund of %s: %d calls, %d failed", m.OrderID, calls, failed)
	}
}

// Notifications delayed past pay_by (and its grace), some duplicated, some
// overtaken: the cancel-first rule decides. Each saga's cancel at pay_by
// finds the payments made in time succeeded: they win, PAID, no unit
// released; a buyer who paid then canceled is refunded once; an unpaid
// order is canceled at the provider and its unit released. The
// notifications, when they land, change nothing and refund nothing twice.
// (One order's story: TestPaymentWinsOverDelayedNotification.)
func TestPaymentNotificationsDelayedPastPayBy(t *testing.T) {
	t.Parallel()
	ps := newPaySlice(t, "")
	inTime, canceled, unpaid := paidInTime(8), paidThenCanceled(3), neverPaid(3)
	b := newPayBurst(ps, 30*time.Second, inTime, canceled, unpaid)
	payBy := *inTime.ms[0].PayBy
	ps.tp.SetKnobs(testpay.Knobs{Delay: time.Until(payBy) + order.PayGrace + 10*time.Second,
		Duplicate: 0.2, Reorder: 0.05, ReorderBy: 2 * time.Second})
	b.pay(inTime)
	b.pay(canceled)
	b.cancel(canceled)
	b.settle(2 * time.Minute)
	for _, g := range []*group{inTime, canceled} { // every notification came after pay_by
		for _, m := range g.ms {
			for _, n := range ps.link.notesOf(b.pays[m.OrderID].PaymentID) {
				if !n.at.After(*m.PayBy) {
					t.Fatalf("%s: notification %s judged at %s, before pay_by %s", g.name, n.event, n.at, m.PayBy)
				}
			}
		}
	}
	b.check()
}

// The API killed (SIGKILL) mid-burst: `seckill api` judges the test
// provider's notifications (reaching the provider through testpay.Client);
// it is killed as soon as the first is applied, with the others in flight
// (some duplicated, some overtaken), more buyers pay while it is down, and
// a second API comes up. The provider resends whatever was not answered:
// each event applied once, every payment made in time pays its order once
// (a payment whose buyer canceled is refunded once), no unit released under
// a payment.
func TestPaymentAPIKilledMidBurst(t *testing.T) {
	t.Parallel()
	bin := testkit.SeckillBinary(t)
	addr := testkit.FreeAddr(t)
	ps := newPaySlice(t, "http://"+addr+payhook.NotificationRoute)
	prov := httptest.NewServer(ps.tp.Handler())
	t.Cleanup(prov.Close)
	env := ps.slice.Env("SECKILL_DEV=1", "SECKILL_API_ADDR="+addr, "SECKILL_API_METRICS_ADDR="+testkit.FreeAddr(t),
		"SECKILL_API_INSTANCE="+testkit.Name(t, "api"), "SECKILL_PAYMENT_PROVIDER=testpay",
		"SECKILL_PAYMENT_TESTPAY_URL="+prov.URL, "SECKILL_PAYMENT_TESTPAY_SECRET="+paySecret)
	logs := filepath.Join(t.TempDir(), "api.log")
	startAPI := func(name string) *proc.Child {
		c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{"api"}, Env: env, Log: logs, Append: true, Banner: name}, 0)
		testkit.WaitHTTP(t, "http://"+addr+"/healthz", c, time.Minute)
		return c
	}
	api := startAPI("api 1")

	before, during, canceled := paidInTime(10), paidInTime(6), paidThenCanceled(3)
	before.name, during.name = "paid before the kill", "paid while the API is down"
	b := newPayBurst(ps, time.Minute, before, during, canceled)
	ps.tp.SetKnobs(testpay.Knobs{Duplicate: 0.2, Reorder: 0.5, ReorderBy: 2 * time.Second})
	b.pay(before)
	waitFor(t, time.Minute, "a first notification answered", func() bool { return countNotes(ps.link) > 0 })
	if err := api.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("api killed after %d notifications answered", countNotes(ps.link))
	failures := ps.link.sendFailures()
	b.pay(during)
	b.pay(canceled)
	b.cancel(canceled)
	waitFor(t, time.Minute, "a send to the dead API", func() bool { return ps.link.sendFailures() > failures })
	startAPI("api 2")
	b.settle(2 * time.Minute)
	b.check()
}

func countNotes(l *link) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.notes)
}

// waitFor polls cond until it holds, failing the test after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, within)
		}
	}
}
