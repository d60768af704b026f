// Package invariant checks that the pipeline kept its promises for an item
// (after a flash sale: the bench and the failover tests). It loads one
// snapshot of the item (package snapshot: MySQL in one consistent read, Redis
// in one MULTI, Temporal's visibility by the SeckillItemId search attribute)
// and judges it, one small rule function per promise, against what the load
// generator was told (the orders that got 202).
//
// Every broken promise is a Violation with a stable name and an amount (how
// many units or orders it is off by), so a caller can say which and by how much.
//
// The names:
//
//	oversell                more units held than exist (live orders, reservations, or a counter below zero)
//	undersell               a buyer was told SOLD_OUT while fewer than S units were ever reserved
//	units_sold              live orders != accepted orders - released accepted orders
//	lost_order              an accepted order with no row in seckill_order (or still QUEUED) after the drain
//	failed_order            an accepted order that ended FAILED: the buyer got a 202 and is owed an order, so a
//	                        FAILED one is a broken promise, whatever the cause (an outage, a lost Redis write)
//	phantom_order           an order row or reservation no buyer was given a 202 for
//	duplicate_buyer         a buyer holding (or told about) more than one order for the item
//	stock_row               stock row + live orders != S
//	stock_deduction         a live order without its deduction (a PAID one: paid for a unit it does not hold), or a
//	                        released order whose deduction was not restored
//	redis_stock             Redis stock_left + live reservations != S
//	leaked_unit             a unit held by an order that was released (or whose row is gone), or, after the payment
//	                        window, a unpaid unit not back in Redis or in the stock row
//	released_live_order     a live order whose Redis reservation is gone (its unit could be sold twice)
//	pending_after_timeout   an order still PENDING_PAYMENT after every payment window closed
//	workflow_missing        an accepted order with no workflow
//	workflow_stuck          a running workflow whose order is not waiting for payment (a saga of an order paid or
//	                        cancelled at the door may run until its deadline + grace + 1 min: it waits for its wake)
//	workflow_uncompensated  a failed, terminated or timed-out workflow whose order still holds its unit
//
// and the money rules (package books; amount: how many orders or payments):
//
//	paid_in_time_not_paid   a payment the provider confirmed before pay_by whose order does not hold its unit (ledger.Owed)
//	provider_differs        a payment's figures in the provider's own ledger differ from ours (Deps.Ledger)
//	books_unbalanced        captured - refunded - owed != the price of the paid orders, in a currency
//	paid_order_payment      a paid order without exactly one succeeded payment of its price (Input.RequirePayments)
//	refund_missing          money owed back (ledger.RefundDue) with no refund asked, past Input.RefundGrace
//	refund_stuck            a refund asked and not confirmed past Input.RefundGrace
//	refund_without_payment  a refund of no payment, of one that took no money, or of another amount
package invariant

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/store"
)

// Violation names.
const (
	Oversell              = "oversell"
	Undersell             = "undersell"
	UnitsSold             = "units_sold"
	LostOrder             = "lost_order"
	FailedOrder           = "failed_order"
	PhantomOrder          = "phantom_order"
	DuplicateBuyer        = "duplicate_buyer"
	StockRow              = "stock_row"
	StockDeduction        = "stock_deduction"
	RedisStock            = "redis_stock"
	LeakedUnit            = "leaked_unit"
	ReleasedLiveOrder     = "released_live_order"
	PendingAfterTimeout   = "pending_after_timeout"
	WorkflowMissing       = "workflow_missing"
	WorkflowStuck         = "workflow_stuck"
	WorkflowUncompensated = "workflow_uncompensated"
)

// DefaultRefundGrace is Input.RefundGrace when zero (SECKILL_RECONCILE_GRACE's default).
const DefaultRefundGrace = 2 * time.Minute

// Accepted is one purchase attempt that was answered 202.
type Accepted struct {
	OrderID string `json:"order_id"`
	UserID  int64  `json:"user_id"`
}

// Deps are the systems the checker reads. Workflows may be nil: the Temporal
// checks are then skipped and the report says so.
type Deps struct {
	Store     snapshot.MySQL
	Stock     snapshot.Redis
	Workflows snapshot.WorkflowLister
	// Ledger: the provider whose own books the money rules compare with
	// (its Recorder nil: our copies only).
	Ledger books.Ledger
}

// Input says what to check.
type Input struct {
	ItemID int64
	// Accepted are the 202 answers the load generator received.
	Accepted []Accepted
	// AcceptedComplete says Accepted holds every 202 (no client timeouts, no
	// other buyers): orders outside it are then phantoms. Otherwise orders
	// outside it are counted as accepted (their answers were lost).
	AcceptedComplete bool
	// SoldOutSeen says some buyer was answered 410 SOLD_OUT.
	SoldOutSeen bool
	// AfterTimeouts says every payment window has closed: no order may still
	// be pending, and every unpaid unit must be back.
	AfterTimeouts bool
	// RequirePayments: every paid order must have been paid by a provider
	// payment (books.Options; a sale under SECKILL_PAYMENT_PROVIDER=stripe).
	RequirePayments bool
	// RefundGrace: how long money owed back may wait for a confirmed refund
	// (0: DefaultRefundGrace).
	RefundGrace time.Duration
	// Records: the provider's own ledger of the item's payments (nil: Check
	// reads them through Deps.Ledger, if it has a Recorder).
	Records map[string]provider.Record
}

// Violation is one broken invariant.
type Violation struct {
	Name string `json:"name"`
	// Amount is how many units or orders it is off by (signed where the
	// direction matters: positive = too many).
	Amount int64  `json:"amount"`
	Detail string `json:"detail"`
}

func (v Violation) String() string { return fmt.Sprintf("%s by %d: %s", v.Name, v.Amount, v.Detail) }

// Report is what the checker saw and what it found.
type Report struct {
	ItemID            int64            `json:"item_id"`
	StockTotal        int64            `json:"stock_total"`
	Accepted          int              `json:"accepted"`
	OrdersByStatus    map[string]int64 `json:"orders_by_status"`
	LiveOrders        int64            `json:"live_orders"` // PENDING_PAYMENT + PAID
	StockRow          int64            `json:"stock_row"`
	Deductions        int64            `json:"deductions_unrestored"`
	RedisLeft         int64            `json:"redis_left"`
	RedisReservations int64            `json:"redis_reservations"`
	RedisBuyers       int64            `json:"redis_buyers"`
	WorkflowsChecked  bool             `json:"workflows_checked"`
	// WorkflowsError is why the sagas could not be listed (the Temporal
	// checks skipped); empty when they were, or were not asked for.
	WorkflowsError    string           `json:"workflows_error,omitempty"`
	WorkflowsByStatus map[string]int64 `json:"workflows_by_status,omitempty"`
	AfterTimeouts     bool             `json:"after_timeouts"`
	// Unanswered counts orders whose 202 no buyer received (counted as
	// accepted when Input.AcceptedComplete is false).
	Unanswered int `json:"unanswered,omitempty"`
	// Money is the sale's books per currency (RefundsPending: owed back);
	// Provider the same figures as the provider's own ledger has them, over
	// the ProviderRead payments whose record was read (Deps.Ledger, or
	// Input.Records; books.Sale's).
	Money        []store.Money `json:"money"`
	Provider     []store.Money `json:"provider,omitempty"`
	ProviderRead int           `json:"provider_read,omitempty"`
	Violations   []Violation   `json:"violations"`
}

// OK reports whether no invariant was broken.
func (r Report) OK() bool { return len(r.Violations) == 0 }

// Has reports whether a violation with that name was found.
func (r Report) Has(name string) bool {
	_, ok := r.Find(name)
	return ok
}

// Find returns the violation with that name.
func (r Report) Find(name string) (Violation, bool) {
	for _, v := range r.Violations {
		if v.Name == name {
			return v, true
		}
	}
	return Violation{}, false
}

// Check loads the item's snapshot and judges it. An error means it could not
// read; violations are in the report. When only the sagas could not be
// listed, the report still judges MySQL and Redis (the Temporal checks
// skipped, WorkflowsError says why) beside the error, so a caller keeps
// what was read.
func Check(ctx context.Context, d Deps, in Input) (Report, error) {
	it, err := snapshot.Load(ctx, snapshot.Sources{MySQL: d.Store, Redis: d.Stock, Workflows: d.Workflows}, in.ItemID)
	if err != nil {
		return Report{ItemID: in.ItemID, Accepted: len(in.Accepted), AfterTimeouts: in.AfterTimeouts}, err
	}
	if in.Records == nil {
		if in.Records, err = d.Ledger.Read(ctx, it); err != nil {
			return Report{ItemID: in.ItemID, Accepted: len(in.Accepted), AfterTimeouts: in.AfterTimeouts}, err
		}
	}
	rep := Judge(it, in)
	if it.WorkflowsErr != nil {
		rep.WorkflowsError = it.WorkflowsErr.Error()
		return rep, it.WorkflowsErr
	}
	return rep, nil
}

// rules are the promises, each judged on its own.
var rules = []func(c *check){
	oversell, undersell, acceptedOrders, phantomOrders, duplicateBuyers, stockRow, stockDeductions,
	redisStock, leakedUnits, releasedLiveOrders, pendingAfterTimeouts, workflows, money,
}

// Judge checks every promise on a snapshot.
func Judge(it *snapshot.Item, in Input) Report {
	c := newCheck(it, in)
	for _, rule := range rules {
		rule(c)
	}
	sort.SliceStable(c.rep.Violations, func(i, j int) bool { return c.rep.Violations[i].Name < c.rep.Violations[j].Name })
	return c.rep
}

// check is a snapshot with the tallies the rules share.
type check struct {
	it  *snapshot.Item
	in  Input
	rep Report
	S   int64
	// acc: accepted order id -> buyer (with the unanswered ones when the
	// answers are incomplete).
	acc                         map[string]int64
	live, queued, paid, pending int64
}

func newCheck(it *snapshot.Item, in Input) *check {
	c := &check{it: it, in: in, S: it.MySQL.Item.StockTotal, acc: make(map[string]int64, len(in.Accepted))}
	c.rep = Report{ItemID: in.ItemID, Accepted: len(in.Accepted), OrdersByStatus: map[string]int64{},
		AfterTimeouts: in.AfterTimeouts, StockTotal: c.S, StockRow: it.MySQL.Stock.Stock,
		RedisLeft: it.Redis.Left, RedisReservations: int64(len(it.Redis.Reservations)), RedisBuyers: int64(len(it.Redis.Marks)),
		Violations: []Violation{}}
	for _, r := range it.MySQL.Orders {
		c.rep.OrdersByStatus[string(r.Status)]++
		switch {
		case snapshot.Live(r.Status):
			c.live++
		case r.Status == order.StatusQueued:
			c.queued++
		}
		switch r.Status {
		case order.StatusPaid:
			c.paid++
		case order.StatusPendingPayment:
			c.pending++
		}
	}
	c.rep.LiveOrders = c.live
	for _, d := range it.MySQL.Deductions {
		if !d.Restored {
			c.rep.Deductions++
		}
	}
	for _, a := range in.Accepted {
		c.acc[a.OrderID] = a.UserID
	}
	if !in.AcceptedComplete {
		// Some answers never reached the buyers (an instance killed mid
		// request, client timeouts): an order row or a reservation exists
		// only because a buyer's request reserved it, so it counts as
		// accepted; its 202 was lost on the way.
		for _, r := range it.MySQL.Orders {
			if _, ok := c.acc[r.OrderID]; !ok {
				c.acc[r.OrderID] = r.UserID
				c.rep.Unanswered++
			}
		}
		for id, m := range it.Redis.Reservations {
			if _, ok := c.acc[id]; !ok {
				c.acc[id] = m.UserID
				c.rep.Unanswered++
			}
		}
	}
	return c
}

func (c *check) add(name string, amount int64, format string, args ...any) {
	c.rep.Violations = append(c.rep.Violations, Violation{Name: name, Amount: amount, Detail: fmt.Sprintf(format, args...)})
}

// oversell: nothing may hold more units than exist, no counter below zero.
func oversell(c *check) {
	var over []string
	var by int64
	note := func(n int64, what string) {
		if n > 0 {
			over = append(over, what)
			by = max(by, n)
		}
	}
	resv := int64(len(c.it.Redis.Reservations))
	note(c.live-c.S, fmt.Sprintf("%d live orders for %d units", c.live, c.S))
	note(resv-c.S, fmt.Sprintf("%d live reservations for %d units", resv, c.S))
	note(-c.it.Redis.Left, fmt.Sprintf("redis stock_left is %d", c.it.Redis.Left))
	note(-c.rep.StockRow, fmt.Sprintf("stock row is %d", c.rep.StockRow))
	if len(over) > 0 {
		c.add(Oversell, by, "%s", strings.Join(over, "; "))
	}
}

// undersell: a SOLD_OUT answer means every unit was reserved at that moment.
func undersell(c *check) {
	if c.in.SoldOutSeen && int64(len(c.acc)) < c.S {
		c.add(Undersell, c.S-int64(len(c.acc)), "buyers were told SOLD_OUT but only %d of %d units were ever accepted", len(c.acc), c.S)
	}
}

// acceptedOrders: every accepted order is live or released (live = accepted
// - released), none lost, none FAILED.
func acceptedOrders(c *check) {
	var accReleased int64
	var lost, failed []string
	for id := range c.acc {
		r, ok := c.it.Orders[id]
		switch {
		case !ok || r.Status == order.StatusQueued:
			lost = append(lost, id)
		case snapshot.Released(r.Status):
			accReleased++
			if r.Status == order.StatusFailed {
				failed = append(failed, id)
			}
		}
	}
	if len(failed) > 0 {
		c.add(FailedOrder, int64(len(failed)), "accepted orders (202) that ended FAILED, e.g. %s", sample(failed))
	}
	if want := int64(len(c.acc)) - accReleased; c.live != want {
		c.add(UnitsSold, c.live-want, "%d units sold (PENDING_PAYMENT+PAID), want %d = %d accepted - %d released (min(S=%d, buyers with 202) when nothing was released)",
			c.live, want, len(c.acc), accReleased, c.S)
	}
	if len(lost) > 0 {
		c.add(LostOrder, int64(len(lost)), "accepted orders without a persisted order after the drain, e.g. %s", sample(lost))
	}
}

// phantomOrders: with every answer known, no row or reservation exists that
// no buyer was given a 202 for.
func phantomOrders(c *check) {
	if !c.in.AcceptedComplete {
		return
	}
	var phantom []string
	for _, r := range c.it.MySQL.Orders {
		if _, ok := c.acc[r.OrderID]; !ok {
			phantom = append(phantom, r.OrderID)
		}
	}
	for id := range c.it.Redis.Reservations {
		_, accepted := c.acc[id]
		_, row := c.it.Orders[id]
		if !accepted && !row {
			phantom = append(phantom, id)
		}
	}
	if len(phantom) > 0 {
		c.add(PhantomOrder, int64(len(phantom)), "orders no buyer got a 202 for, e.g. %s", sample(phantom))
	}
}

// duplicateBuyers: one order per buyer per item, wherever we look. The
// buyers hash maps a buyer to exactly one order id, so any order of that
// buyer with another id is a second order.
func duplicateBuyers(c *check) {
	idsOf := map[int64]map[string]bool{}
	see := func(user int64, id string) {
		if idsOf[user] == nil {
			idsOf[user] = map[string]bool{}
		}
		idsOf[user][id] = true
	}
	for id, u := range c.acc {
		see(u, id)
	}
	for id, m := range c.it.Redis.Reservations {
		see(m.UserID, id)
	}
	for _, r := range c.it.MySQL.Orders {
		see(r.UserID, r.OrderID)
	}
	var extra int64
	var users []string
	for u, ids := range idsOf {
		n := int64(len(ids) - 1)
		if mark, ok := c.it.Redis.Marks[u]; ok && !ids[mark] {
			n++ // the mark names an order we never saw: the buyer still has two
		}
		if n > 0 {
			extra += n
			users = append(users, fmt.Sprintf("buyer %d: %s", u, strings.Join(slices.Sorted(maps.Keys(ids)), ",")))
		}
	}
	if extra > 0 {
		c.add(DuplicateBuyer, extra, "buyers with more than one order for the item: %s", sample(users))
	}
}

// stockRow: the row and the live orders account for every unit.
func stockRow(c *check) {
	if d := c.rep.StockRow + c.live - c.S; d != 0 {
		c.add(StockRow, d, "stock row %d + live orders %d != %d units", c.rep.StockRow, c.live, c.S)
	}
}

// stockDeductions: a live order holds an unrestored deduction, a released
// one does not. A PAID order without one is named apart: a payment taken for
// a unit MySQL never gave it (it must have ended REFUNDED).
func stockDeductions(c *check) {
	var paid, pending, notRestored []string
	for _, r := range c.it.MySQL.Orders {
		d, ok := c.it.Deductions[r.OrderID]
		switch {
		case r.Status == order.StatusPaid && (!ok || d.Restored):
			paid = append(paid, r.OrderID)
		case snapshot.Live(r.Status) && (!ok || d.Restored):
			pending = append(pending, r.OrderID)
		case snapshot.Released(r.Status) && ok && !d.Restored:
			notRestored = append(notRestored, r.OrderID)
		}
	}
	var detail []string
	if len(paid) > 0 {
		detail = append(detail, fmt.Sprintf("%d PAID orders without a unit (no unrestored deduction), e.g. %s", len(paid), sample(paid)))
	}
	if len(pending) > 0 {
		detail = append(detail, fmt.Sprintf("%d PENDING_PAYMENT orders without a deduction, e.g. %s", len(pending), sample(pending)))
	}
	if len(notRestored) > 0 {
		detail = append(detail, fmt.Sprintf("%d released orders whose deduction was not restored, e.g. %s", len(notRestored), sample(notRestored)))
	}
	if len(detail) > 0 {
		c.add(StockDeduction, int64(len(paid)+len(pending)+len(notRestored)), "%s", strings.Join(detail, "; "))
	}
}

// redisStock: stock_left and the live reservations account for every unit.
func redisStock(c *check) {
	left, resv := c.it.Redis.Left, int64(len(c.it.Redis.Reservations))
	if d := left + resv - c.S; d != 0 {
		c.add(RedisStock, d, "redis stock_left %d + live reservations %d != %d units", left, resv, c.S)
	}
}

// leakedUnits: no released order holds a reservation; after the payment
// windows every unpaid unit is back in Redis and in the stock row.
func leakedUnits(c *check) {
	var leaked []string
	for id := range c.it.Redis.Reservations {
		if r, ok := c.it.Orders[id]; ok && snapshot.Released(r.Status) {
			leaked = append(leaked, id)
		}
	}
	by := int64(len(leaked))
	var detail []string
	if len(leaked) > 0 {
		detail = append(detail, fmt.Sprintf("%d reservations held by released orders (e.g. %s)", len(leaked), sample(leaked)))
	}
	if c.in.AfterTimeouts {
		want := c.S - c.paid
		if d := want - c.it.Redis.Left; d > 0 {
			by = max(by, d)
			detail = append(detail, fmt.Sprintf("redis stock_left %d, want %d = %d units - %d paid", c.it.Redis.Left, want, c.S, c.paid))
		}
		if d := want - c.rep.StockRow; d > 0 {
			by = max(by, d)
			detail = append(detail, fmt.Sprintf("stock row %d, want %d = %d units - %d paid", c.rep.StockRow, want, c.S, c.paid))
		}
	}
	if len(detail) > 0 {
		c.add(LeakedUnit, by, "%s", strings.Join(detail, "; "))
	}
}

// releasedLiveOrders: a live order keeps its Redis reservation (else its
// unit could be sold twice).
func releasedLiveOrders(c *check) {
	var gone []string
	for _, r := range c.it.MySQL.Orders {
		if _, ok := c.it.Redis.Reservations[r.OrderID]; snapshot.Live(r.Status) && !ok {
			gone = append(gone, r.OrderID)
		}
	}
	if len(gone) > 0 {
		c.add(ReleasedLiveOrder, int64(len(gone)), "live orders whose redis reservation was released (unit sellable twice), e.g. %s", sample(gone))
	}
}

// pendingAfterTimeouts: once every window closed, nothing is still open.
func pendingAfterTimeouts(c *check) {
	if c.in.AfterTimeouts && c.pending+c.queued > 0 {
		c.add(PendingAfterTimeout, c.pending+c.queued, "%d orders PENDING_PAYMENT and %d QUEUED after every payment window closed", c.pending, c.queued)
	}
}

// workflows: every accepted order has a saga; a running saga waits for a
// payment; a saga that ended badly left no unit held.
func workflows(c *check) {
	if !c.it.WorkflowsRead {
		return
	}
	c.rep.WorkflowsChecked = true
	c.rep.WorkflowsByStatus = map[string]int64{}
	var stuck, uncomp, missing []string
	for _, w := range c.it.Workflows {
		c.rep.WorkflowsByStatus[w.Status]++
		r, ok := c.it.Orders[w.OrderID]
		_, holds := c.it.Redis.Reservations[w.OrderID]
		switch w.Status {
		case "Running":
			if !ok || r.Status != order.StatusPendingPayment || c.in.AfterTimeouts {
				// A saga of an order paid or cancelled at the door waits for
				// its paced wake, at the latest for its own timer; a minute
				// on top covers a busy Temporal server.
				if !ok || !r.Status.Final() || !c.it.At.Before(snapshot.WakesBy(r).Add(time.Minute)) {
					stuck = append(stuck, w.WorkflowID)
				}
			}
		case "Completed", "ContinuedAsNew":
		default: // Failed, Canceled, Terminated, TimedOut
			if holds || (ok && !snapshot.Released(r.Status)) {
				uncomp = append(uncomp, w.WorkflowID+"("+w.Status+")")
			}
		}
	}
	for id := range c.acc {
		if _, ok := c.it.Sagas[id]; !ok {
			missing = append(missing, id)
		}
	}
	if len(missing) > 0 {
		c.add(WorkflowMissing, int64(len(missing)), "accepted orders without a workflow, e.g. %s", sample(missing))
	}
	if len(stuck) > 0 {
		c.add(WorkflowStuck, int64(len(stuck)), "running workflows whose order is not waiting for payment, e.g. %s", sample(stuck))
	}
	if len(uncomp) > 0 {
		c.add(WorkflowUncompensated, int64(len(uncomp)), "closed-unsuccessfully workflows whose order still holds its unit, e.g. %s", sample(uncomp))
	}
}

// money: the books balance, each paid order has its payment, each payment
// owed back is refunded within the grace, each refund has its payment.
func money(c *check) {
	b := books.Judge(c.it, books.Options{RequirePayments: c.in.RequirePayments, Grace: cmp.Or(c.in.RefundGrace, DefaultRefundGrace),
		Records: c.in.Records})
	c.rep.Money, c.rep.Provider, c.rep.ProviderRead = b.Money, b.Provider, b.ProviderRead
	byKind := map[string][]string{}
	for _, p := range b.Problems {
		e := p.Detail
		if p.OrderID != "" {
			e = "order " + p.OrderID + ": " + e
		}
		byKind[p.Kind] = append(byKind[p.Kind], e)
	}
	for _, kind := range books.Kinds {
		if ps := byKind[kind]; len(ps) > 0 {
			c.add(kind, int64(len(ps)), "%s", sample(ps))
		}
	}
}

// sample lists up to three examples.
func sample(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	if len(s) > 3 {
		return strings.Join(s[:3], ", ") + fmt.Sprintf(" (+%d more)", len(s)-3)
	}
	return strings.Join(s, ", ")
}
