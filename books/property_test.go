package books_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
)

// The money invariants under random interleavings, on MySQL: a few orders
// of one item, their payments at a provider modelled here (the provider's
// truth: when each payment succeeded, if it did), and every actor's step in
// a random order — the saga's persist, deduction and close (cancel-first,
// then complete a payment confirmed in time or close), buyers' checkouts,
// pays in time and late, cancels at the door, the provider's notifications
// (delivered late, twice, under a second event id, or a contradicting one),
// support's refunds, and the refund driver's attempts (confirmed, or failed
// for good and asked anew); any step may be retried (a lost reply). After
// every step the books are judged and the invariants checked on what MySQL
// holds. SECKILL_PROPERTY_SEED replays a run; SECKILL_PROPERTY_RUNS and
// _STEPS make it longer.
func TestMoneyInvariantsUnderRandomInterleavings(t *testing.T) {
	t.Parallel()
	st, _ := testkit.MySQL(t)
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("SECKILL_PROPERTY_SEED"), 10, 64); err == nil {
		seed = s
	}
	runs, steps := envInt("SECKILL_PROPERTY_RUNS", 4), envInt("SECKILL_PROPERTY_STEPS", 150)
	t.Logf("seed %d (SECKILL_PROPERTY_SEED=%d replays it), %d runs of %d steps", seed, seed, runs, steps)
	for run := range runs {
		w := newWorld(t, st, rand.New(rand.NewPCG(seed, uint64(run))), 5)
		for step := range steps {
			w.step()
			if err := w.check(false); err != nil {
				t.Fatalf("seed %d run %d step %d: %v\nsteps:\n%s", seed, run, step, err, w.trail())
			}
		}
		w.settle()
		if err := w.check(true); err != nil {
			t.Fatalf("seed %d run %d settled: %v\nsteps:\n%s", seed, run, err, w.trail())
		}
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// A payment at the modelled provider.
type provPayment struct {
	id, orderID string
	status      string // ledger.PaymentPending, PaymentSucceeded, PaymentCanceled (the provider's word)
	at          time.Time
	contradict  bool // a notification of another amount was delivered for it
	extra       int  // further event ids of the same success delivered
}

// A world is one item's orders, the provider's payments and what each
// actor has done.
type world struct {
	t        *testing.T
	ctx      context.Context
	st       *store.Store
	rnd      *rand.Rand
	item     store.Item
	orders   []string
	users    map[string]int64
	payBy    time.Time
	saga     map[string]string // none, persisted, deducted, closed
	cancels  map[string]bool   // the buyer cancelled at the door (before paying)
	pays     map[string][]*provPayment
	log      []string
	last     func()
	payments map[int64]string  // payment id -> its last status seen
	states   map[string]string // order id -> its last ledger state seen
	seq      int
}

func newWorld(t *testing.T, st *store.Store, rnd *rand.Rand, n int) *world {
	t.Helper()
	ctx := context.Background()
	// pay_by passed: the close is due at once by the database's clock; the
	// provider's times say whether a pay was in time.
	payBy := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	it, err := st.CreateItem(ctx, store.Item{Name: "property", PriceCents: 999, Currency: "EUR", StockTotal: int64(n),
		StartAt: time.Now().Add(-time.Hour), EndAt: time.Now().Add(time.Hour), PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ctx: ctx, st: st, rnd: rnd, item: it, users: map[string]int64{}, payBy: payBy, saga: map[string]string{},
		cancels: map[string]bool{}, pays: map[string][]*provPayment{}, payments: map[int64]string{}, states: map[string]string{}}
	for i := range n {
		id := order.NewID()
		w.orders = append(w.orders, id)
		w.users[id] = it.ID*100 + int64(i) + 1
		w.saga[id] = "none"
	}
	return w
}

func (w *world) do(format string, args ...any) { w.log = append(w.log, fmt.Sprintf(format, args...)) }

func (w *world) trail() string {
	out := ""
	for i, l := range w.log {
		out += fmt.Sprintf("  %3d %s\n", i, l)
	}
	return out
}

// must fails the test on an error that is not a business outcome.
func (w *world) must(err error) {
	w.t.Helper()
	if err != nil && !errors.Is(err, order.ErrNotPayable) && !errors.Is(err, order.ErrNotFound) &&
		!errors.Is(err, store.ErrOrderClosed) && !errors.Is(err, store.ErrNotDue) && !errors.Is(err, store.ErrDuplicate) &&
		!errors.Is(err, order.ErrNotRefundable) {
		w.t.Fatalf("%v\nsteps:\n%s", err, w.trail())
	}
}

func (w *world) pick() string { return w.orders[w.rnd.IntN(len(w.orders))] }

// step runs one random actor's step, or retries the last one.
func (w *world) step() {
	if w.last != nil && w.rnd.IntN(8) == 0 {
		w.do("  (retried)")
		w.last()
		return
	}
	o := w.pick()
	acts := []func(string){w.persist, w.deduct, w.checkout, w.buyerPays, w.buyerPays, w.deliver, w.deliver, w.deliver,
		w.contradict, w.cancelAtDoor, w.close, w.close, w.support, w.refunds, w.refunds}
	act := acts[w.rnd.IntN(len(acts))]
	w.last = func() { act(o) }
	w.last()
}

func (w *world) persist(o string) {
	if w.saga[o] != "none" {
		return
	}
	w.do("persist %s", o)
	payBy := w.payBy
	_, err := w.st.CreateQueuedOrder(w.ctx, store.Order{OrderID: o, UserID: w.users[o], ItemID: w.item.ID, PayBy: &payBy})
	w.must(err)
	w.saga[o] = "persisted"
}

func (w *world) deduct(o string) {
	if w.saga[o] != "persisted" {
		return
	}
	w.do("deduct %s", o)
	_, _, err := w.st.DeductStock(w.ctx, o, w.item.ID, time.Minute)
	w.must(err)
	w.saga[o] = "deducted"
}

func (w *world) checkout(o string) {
	if w.saga[o] == "closed" || len(w.pays[o]) >= 2 {
		return
	}
	w.seq++
	p := &provPayment{id: fmt.Sprintf("pi_%d_%d", w.item.ID, w.seq), orderID: o, status: ledger.PaymentPending}
	w.do("checkout %s: %s", o, p.id)
	_, err := w.st.SavePayment(w.ctx, store.Payment{OrderID: o, UserID: w.users[o], ItemID: w.item.ID, Provider: "testpay",
		ProviderPaymentID: p.id, Amount: w.item.PriceCents, Currency: w.item.Currency, PayBy: w.payBy})
	w.must(err)
	w.pays[o] = append(w.pays[o], p)
}

// buyerPays: the card at the provider, in time or late (before the close
// cancels the payment there).
func (w *world) buyerPays(o string) {
	for _, p := range w.pays[o] {
		if p.status != ledger.PaymentPending {
			continue
		}
		p.status, p.at = ledger.PaymentSucceeded, w.payBy.Add(-time.Duration(1+w.rnd.IntN(30000))*time.Millisecond)
		if w.rnd.IntN(4) == 0 {
			p.at = w.payBy.Add(time.Duration(w.rnd.IntN(5000)) * time.Millisecond) // late
		}
		w.do("buyer of %s pays %s at pay_by%+v", o, p.id, p.at.Sub(w.payBy))
		return
	}
}

func (w *world) event(p *provPayment, id string, amount int64) store.PaymentEvent {
	return store.PaymentEvent{ID: id, Type: "payment_succeeded", Provider: "testpay", PaymentID: p.id, OrderID: p.orderID,
		Amount: amount, Currency: w.item.Currency, At: p.at}
}

// deliver: a notification of the provider's word, its first event id or
// (Stripe sends two types per success) a further one.
func (w *world) deliver(o string) {
	for _, p := range w.pays[o] {
		switch p.status {
		case ledger.PaymentSucceeded:
			id := "evt_" + p.id
			if w.rnd.IntN(3) == 0 {
				p.extra++
				id += "_" + strconv.Itoa(p.extra)
			}
			w.do("deliver %s of %s", id, p.id)
			_, err := w.st.ApplyPaymentEvent(w.ctx, w.event(p, id, w.item.PriceCents))
			w.must(err)
			return
		case ledger.PaymentCanceled:
			w.do("deliver the cancel of %s", p.id)
			_, err := w.st.ApplyPaymentEvent(w.ctx, store.PaymentEvent{ID: "evt_cancel_" + p.id, Type: "payment_canceled",
				Provider: "testpay", PaymentID: p.id})
			w.must(err)
			return
		}
	}
}

// contradict: a well-signed success of another amount for a payment the
// buyer paid (a provider's bug, or a partial capture).
func (w *world) contradict(o string) {
	for _, p := range w.pays[o] {
		if p.status == ledger.PaymentSucceeded && !p.contradict && w.rnd.IntN(3) == 0 {
			p.contradict = true
			w.do("contradict %s with another amount", p.id)
			_, err := w.st.ApplyPaymentEvent(w.ctx, w.event(p, "evt_other_"+p.id, w.item.PriceCents+1))
			w.must(err)
			return
		}
	}
}

// cancelAtDoor: the buyer's cancel, received before pay_by.
func (w *world) cancelAtDoor(o string) {
	if w.saga[o] == "closed" {
		return
	}
	w.do("buyer cancels %s at the door", o)
	_, changed, err := w.st.RecordCancel(w.ctx, o, w.users[o], w.payBy.Add(-time.Second), true)
	if errors.Is(err, order.ErrNotFound) && w.saga[o] == "none" {
		// No row yet: the door inserts the cancel (its proof is the reservation, not modelled here).
		_, err = w.st.InsertEarly(w.ctx, []store.Early{{M: order.Message{OrderID: o, UserID: w.users[o], ItemID: w.item.ID,
			ReservedAt: w.payBy.Add(-time.Minute), PayBy: &w.payBy}, ReceivedAt: w.payBy.Add(-time.Second)}})
		changed = err == nil
	}
	w.must(err)
	w.cancels[o] = w.cancels[o] || changed
}

// close is the saga at pay_by + grace: cancel-first at the provider (a
// payment found succeeded is applied with the provider's time), then a
// QUEUED order paid in time takes its unit, any other open one closes.
func (w *world) close(o string) {
	if w.saga[o] == "none" || w.saga[o] == "closed" {
		return
	}
	w.do("saga closes %s (was %s)", o, w.saga[o])
	rows, err := w.st.OrderPayments(w.ctx, o)
	w.must(err)
	for _, r := range rows {
		if r.Status != store.PaymentPending {
			continue
		}
		p := w.provider(o, r.ProviderPaymentID)
		ev := store.PaymentEvent{ID: "saga-cancel:testpay:" + p.id, Type: "payment_canceled", Provider: "testpay", PaymentID: p.id}
		if p.status == ledger.PaymentPending {
			p.status = ledger.PaymentCanceled
		}
		if p.status == ledger.PaymentSucceeded {
			ev = w.event(p, ev.ID, w.item.PriceCents)
		}
		_, err := w.st.ApplyPaymentEvent(w.ctx, ev)
		w.must(err)
	}
	for _, p := range w.pays[o] { // the provider closes whatever is still open
		if p.status == ledger.PaymentPending {
			p.status = ledger.PaymentCanceled
		}
	}
	row, err := w.st.FindOrder(w.ctx, o)
	w.must(err)
	if row.PaidQueued() {
		_, _, err = w.st.DeductStock(w.ctx, o, w.item.ID, time.Minute)
		w.must(err)
	}
	_, err = w.st.CloseOrder(w.ctx, store.Order{OrderID: o, UserID: w.users[o], ItemID: w.item.ID},
		store.Closing{Status: order.StatusCancelled, Reason: order.ReasonPaymentTimeout, AfterDeadline: order.PayGrace})
	w.must(err)
	w.saga[o] = "closed"
}

func (w *world) provider(o, id string) *provPayment {
	for _, p := range w.pays[o] {
		if p.id == id {
			return p
		}
	}
	w.t.Fatalf("payment %s of %s unknown to the provider", id, o)
	return nil
}

func (w *world) support(o string) {
	w.do("support refunds %s", o)
	_, _, err := w.st.OweSupportRefund(w.ctx, o, "support", store.AskedBySupport+"1")
	w.must(err)
}

// refunds is the refund driver's attempt on the order's owed refunds: the
// provider confirms it, or fails it for good (asked anew next time).
func (w *world) refunds(o string) {
	rs, err := w.st.OrderRefunds(w.ctx, o)
	w.must(err)
	for _, r := range rs {
		if r.Status == store.RefundSucceeded {
			continue
		}
		if r.Status == store.RefundFailed {
			r, err = w.st.RetryRefund(w.ctx, r)
			w.must(err)
		}
		status := store.RefundSucceeded
		if w.rnd.IntN(4) == 0 {
			status = store.RefundFailed
		}
		w.do("refund of %s: %s (attempt %d)", r.ProviderPaymentID, status, r.Attempt)
		_, err = w.st.FinishRefund(w.ctx, r, fmt.Sprintf("re_%d_%d", r.ID, r.Attempt), status)
		w.must(err)
	}
}

// settle ends the run: every saga closes, every notification lands, every
// owed refund is confirmed.
func (w *world) settle() {
	w.do("settle")
	for _, o := range w.orders {
		w.persist(o)
		w.close(o)
	}
	for _, o := range w.orders {
		for range 3 {
			w.deliver(o)
		}
	}
	for range 10 {
		for _, o := range w.orders {
			w.refunds(o)
		}
	}
}

// check judges MySQL's state: the moves seen since the last check are the
// ledger's, a paid order holds exactly its payment, money owed back has its
// refund row, the books balance; settled, every payment the provider
// confirmed in time pays its order (unless its buyer cancelled first, support
// refunded it, or a contradicting notification made it a mismatch) and no
// money stays owed.
func (w *world) check(settled bool) error {
	db, err := w.st.ReadItemState(w.ctx, w.item.ID)
	if err != nil {
		return err
	}
	it := snapshot.New(w.item.ID, time.Now(), db, stock.ItemState{}, nil, nil, false)
	refundOf := map[int64]store.Refund{}
	for _, r := range db.Refunds {
		if _, twice := refundOf[r.PaymentID]; twice {
			return fmt.Errorf("two refund rows of payment %s", r.ProviderPaymentID)
		}
		refundOf[r.PaymentID] = r
	}
	for _, p := range db.Payments {
		prev, seen := w.payments[p.ID]
		if seen && prev != p.Status && (prev == ledger.PaymentSucceeded || prev == ledger.PaymentMismatch ||
			p.Status == ledger.PaymentSucceeded && prev != ledger.PaymentPending || !ledger.Allowed(ledger.FactPayment, prev, p.Status)) {
			return fmt.Errorf("payment %s moved %s -> %s", p.ProviderPaymentID, prev, p.Status)
		}
		w.payments[p.ID] = p.Status
		row, found := it.Orders[p.OrderID]
		if ledger.Took(p.Facts()) && ledger.RefundDue(p.Facts(), row.Facts(), found) {
			if _, ok := refundOf[p.ID]; !ok {
				return fmt.Errorf("payment %s (%s) owed back, order %s, and no refund row", p.ProviderPaymentID, p.Status, row.Status)
			}
		}
	}
	for _, o := range db.Orders {
		state := o.Facts().State()
		if prev, seen := w.states[o.OrderID]; seen && !reachable(ledger.FactOrder, prev, state) {
			return fmt.Errorf("order %s moved %s -> %s", o.OrderID, prev, state)
		}
		w.states[o.OrderID] = state
		if o.Status != order.StatusPaid && !o.PaidQueued() {
			continue
		}
		n := 0
		for _, p := range db.Payments {
			if p.OrderID == o.OrderID && ledger.PaidWith(p.Facts(), o.Facts()) {
				n++
				if !p.SucceededAt.Before(w.payBy) || p.Amount != w.item.PriceCents {
					return fmt.Errorf("order %s paid by %s of %d at pay_by%+v", o.OrderID, p.ProviderPaymentID, p.Amount, p.SucceededAt.Sub(w.payBy))
				}
			}
		}
		if n != 1 {
			return fmt.Errorf("%s order %s paid by %d payments", o.Status, o.OrderID, n)
		}
	}
	b := books.Judge(it, books.Options{RequirePayments: true, Grace: time.Hour})
	for _, p := range b.Problems {
		switch {
		case p.Kind == books.Unbalanced, p.Kind == books.PaidWithoutPayment, p.Kind == books.RefundWithoutPayment:
			return fmt.Errorf("books: %s %s: %s", p.Kind, p.OrderID, p.Detail)
		case p.Kind == books.PaidInTimeNotPaid && settled && !w.excused(p.OrderID):
			return fmt.Errorf("books: %s %s: %s", p.Kind, p.OrderID, p.Detail)
		}
	}
	if !settled {
		return nil
	}
	for _, o := range w.orders {
		for _, p := range w.pays[o] {
			if p.status == ledger.PaymentSucceeded && p.at.Before(w.payBy) && !w.excused(o) {
				if row := it.Orders[o]; row.Status != order.StatusPaid {
					return fmt.Errorf("%s paid %s in time (pay_by%+v) and the order is %s %s", o, p.id, p.at.Sub(w.payBy), row.Status, row.Reason)
				}
			}
		}
	}
	for _, m := range b.Money {
		if m.RefundsPending != 0 {
			return fmt.Errorf("settled with %d %s owed back", m.RefundsPending, m.Currency)
		}
	}
	return nil
}

// reachable reports whether the table's moves lead from one state to
// another (a step, the saga's close among them, may make several).
func reachable(f ledger.Fact, from, to string) bool {
	seen, next := map[string]bool{from: true}, []string{from}
	for len(next) > 0 {
		s := next[0]
		next = next[1:]
		if s == to {
			return true
		}
		for _, t := range ledger.Table {
			if t.Fact == f && t.From == s && !seen[t.To] {
				seen[t.To] = true
				next = append(next, t.To)
			}
		}
	}
	return false
}

// excused: the order's buyer cancelled at the door, support refunded it, or
// a contradicting notification made one of its payments a mismatch first.
func (w *world) excused(o string) bool {
	if w.cancels[o] {
		return true
	}
	for _, p := range w.pays[o] {
		if p.contradict {
			return true
		}
	}
	row, err := w.st.FindOrder(w.ctx, o)
	return err == nil && row.Reason == order.ReasonSupportRefund
}
