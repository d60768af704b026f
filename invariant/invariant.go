// Package invariant checks that the pipeline kept its promises for an item
// (after a flash sale: the bench; any time: seckill reconcile). It reads the
// three systems directly — MySQL (item, stock, seckill_order, stock_deduction), Redis (the item's stock_left, reservations
// and buyer marks) and Temporal (the item's order workflows, found by the
// SeckillItemId search attribute) — and compares them with what the load
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
//	stock_deduction         a live order without its deduction, or a released order whose deduction was not restored
//	redis_stock             Redis stock_left + live reservations != S
//	leaked_unit             a unit held by an order that was released (or whose row is gone), or, after the payment
//	                        window, a unpaid unit not back in Redis or in the stock row
//	released_live_order     a live order whose Redis reservation is gone (its unit could be sold twice)
//	pending_after_timeout   an order still PENDING_PAYMENT after every payment window closed
//	workflow_missing        an accepted order with no workflow
//	workflow_stuck          a running workflow whose order is not waiting for payment (a saga of an order paid or
//	                        cancelled at the door may run until its deadline + grace + 1 min: it waits for its wake)
//	workflow_uncompensated  a failed, terminated or timed-out workflow whose order still holds its unit
package invariant

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
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

// Accepted is one purchase attempt that was answered 202.
type Accepted struct {
	OrderID string `json:"order_id"`
	UserID  int64  `json:"user_id"`
}

// Workflow is one order workflow as the visibility API lists it.
type Workflow struct {
	WorkflowID string `json:"workflow_id"`
	OrderID    string `json:"order_id"`
	// Status is Running, Completed, Failed, Canceled, Terminated,
	// ContinuedAsNew or TimedOut.
	Status string `json:"status"`
}

// WorkflowLister lists the order workflows of an item (Temporal in
// production, a fake in tests).
type WorkflowLister interface {
	ListOrderWorkflows(ctx context.Context, itemID int64) ([]Workflow, error)
}

// Units is the Redis side (stock.Store).
type Units interface {
	Left(ctx context.Context, itemID int64) (int64, error)
	Reservations(ctx context.Context, itemID int64) (map[string]order.Message, error)
	BuyerMarks(ctx context.Context, itemID int64) (map[int64]string, error)
}

// Deps are the systems the checker reads. Workflows may be nil: the Temporal
// checks are then skipped and the report says so.
type Deps struct {
	DB        *gorm.DB
	Stock     Units
	Workflows WorkflowLister
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
	WorkflowsByStatus map[string]int64 `json:"workflows_by_status,omitempty"`
	AfterTimeouts     bool             `json:"after_timeouts"`
	// Unanswered counts orders whose 202 no buyer received (counted as
	// accepted when Input.AcceptedComplete is false).
	Unanswered int         `json:"unanswered,omitempty"`
	Violations []Violation `json:"violations"`
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

type orderRow struct {
	OrderID string
	UserID  int64
	Status  order.Status
	PayBy   *time.Time
}

type deductionRow struct {
	OrderID  string
	Restored bool
}

func live(s order.Status) bool { return s == order.StatusPendingPayment || s == order.StatusPaid }

func released(s order.Status) bool { return s == order.StatusCancelled || s == order.StatusFailed }

// Check reads MySQL, Redis and Temporal and returns every violation it finds.
// An error means it could not read; violations are in the report.
func Check(ctx context.Context, d Deps, in Input) (Report, error) {
	rep := Report{ItemID: in.ItemID, Accepted: len(in.Accepted), OrdersByStatus: map[string]int64{},
		AfterTimeouts: in.AfterTimeouts}
	add := func(name string, amount int64, format string, args ...any) {
		rep.Violations = append(rep.Violations, Violation{Name: name, Amount: amount, Detail: fmt.Sprintf(format, args...)})
	}

	// MySQL.
	db := d.DB.WithContext(ctx)
	if err := db.Raw("SELECT stock_total FROM item WHERE id = ?", in.ItemID).Scan(&rep.StockTotal).Error; err != nil {
		return rep, fmt.Errorf("read item %d: %w", in.ItemID, err)
	}
	if rep.StockTotal == 0 {
		return rep, fmt.Errorf("item %d not found in mysql", in.ItemID)
	}
	S := rep.StockTotal
	if err := db.Raw("SELECT stock FROM stock WHERE item_id = ?", in.ItemID).Scan(&rep.StockRow).Error; err != nil {
		return rep, fmt.Errorf("read stock row of item %d: %w", in.ItemID, err)
	}
	var rows []orderRow
	if err := db.Raw("SELECT order_id, user_id, status, pay_by FROM seckill_order WHERE item_id = ?", in.ItemID).
		Scan(&rows).Error; err != nil {
		return rep, fmt.Errorf("read orders of item %d: %w", in.ItemID, err)
	}
	var deds []deductionRow
	if err := db.Raw("SELECT order_id, restored FROM stock_deduction WHERE item_id = ?", in.ItemID).
		Scan(&deds).Error; err != nil {
		return rep, fmt.Errorf("read stock deductions of item %d: %w", in.ItemID, err)
	}

	// Redis.
	left, err := d.Stock.Left(ctx, in.ItemID)
	if err != nil {
		return rep, err
	}
	rep.RedisLeft = left
	resv, err := d.Stock.Reservations(ctx, in.ItemID)
	if err != nil {
		return rep, err
	}
	marks, err := d.Stock.BuyerMarks(ctx, in.ItemID)
	if err != nil {
		return rep, err
	}
	rep.RedisReservations, rep.RedisBuyers = int64(len(resv)), int64(len(marks))
	resvUser := make(map[string]int64, len(resv)) // order id -> buyer
	for id, m := range resv {
		resvUser[id] = m.UserID
	}

	byID := make(map[string]orderRow, len(rows))
	var liveN, releasedN, queuedN, paidN, pendingN int64
	for _, r := range rows {
		byID[r.OrderID] = r
		rep.OrdersByStatus[string(r.Status)]++
		switch {
		case live(r.Status):
			liveN++
		case released(r.Status):
			releasedN++
		case r.Status == order.StatusQueued:
			queuedN++
		}
		if r.Status == order.StatusPaid {
			paidN++
		}
		if r.Status == order.StatusPendingPayment {
			pendingN++
		}
	}
	rep.LiveOrders = liveN
	acc := make(map[string]int64, len(in.Accepted))
	for _, a := range in.Accepted {
		acc[a.OrderID] = a.UserID
	}
	var unanswered int
	if !in.AcceptedComplete {
		// Some answers never reached the buyers (an instance killed mid
		// request, client timeouts): an order row or a reservation exists
		// only because a buyer's request reserved it, so it counts as
		// accepted; its 202 was lost on the way.
		for _, r := range rows {
			if _, ok := acc[r.OrderID]; !ok {
				acc[r.OrderID] = r.UserID
				unanswered++
			}
		}
		for id, u := range resvUser {
			if _, ok := acc[id]; !ok {
				acc[id] = u
				unanswered++
			}
		}
	}
	rep.Unanswered = unanswered

	// oversell: nothing may hold more units than exist, no counter below zero.
	var over []string
	var overBy int64
	note := func(by int64, what string) {
		if by > 0 {
			over = append(over, what)
			overBy = max(overBy, by)
		}
	}
	note(liveN-S, fmt.Sprintf("%d live orders for %d units", liveN, S))
	note(int64(len(resv))-S, fmt.Sprintf("%d live reservations for %d units", len(resv), S))
	note(-left, fmt.Sprintf("redis stock_left is %d", left))
	note(-rep.StockRow, fmt.Sprintf("stock row is %d", rep.StockRow))
	if len(over) > 0 {
		add(Oversell, overBy, "%s", strings.Join(over, "; "))
	}

	// undersell: a SOLD_OUT answer means every unit was reserved at that moment.
	if in.SoldOutSeen && int64(len(acc)) < S {
		add(Undersell, S-int64(len(acc)), "buyers were told SOLD_OUT but only %d of %d units were ever accepted", len(acc), S)
	}

	// units sold: every accepted order is live or released, so live = accepted - released.
	var accReleased, accLive int64
	var lost, failed []string
	for id := range acc {
		r, ok := byID[id]
		switch {
		case !ok || r.Status == order.StatusQueued:
			lost = append(lost, id)
		case released(r.Status):
			accReleased++
			if r.Status == order.StatusFailed {
				failed = append(failed, id)
			}
		default:
			accLive++
		}
	}
	if len(failed) > 0 {
		add(FailedOrder, int64(len(failed)), "accepted orders (202) that ended FAILED, e.g. %s", sample(failed))
	}
	if want := int64(len(acc)) - accReleased; liveN != want {
		add(UnitsSold, liveN-want, "%d units sold (PENDING_PAYMENT+PAID), want %d = %d accepted - %d released (min(S=%d, buyers with 202) when nothing was released)",
			liveN, want, len(acc), accReleased, S)
	}
	if len(lost) > 0 {
		add(LostOrder, int64(len(lost)), "accepted orders without a persisted order after the drain, e.g. %s", sample(lost))
	}
	if in.AcceptedComplete {
		var phantom []string
		for _, r := range rows {
			if _, ok := acc[r.OrderID]; !ok {
				phantom = append(phantom, r.OrderID)
			}
		}
		for id := range resvUser {
			if _, ok := acc[id]; !ok {
				if _, row := byID[id]; !row {
					phantom = append(phantom, id)
				}
			}
		}
		if len(phantom) > 0 {
			add(PhantomOrder, int64(len(phantom)), "orders no buyer got a 202 for, e.g. %s", sample(phantom))
		}
	}

	// duplicate_buyer: one order per buyer per item, wherever we look. The
	// buyers hash maps a buyer to exactly one order id, so any order of that
	// buyer with another id is a second order.
	orderIDsOf := map[int64]map[string]bool{}
	see := func(user int64, id string) {
		if orderIDsOf[user] == nil {
			orderIDsOf[user] = map[string]bool{}
		}
		orderIDsOf[user][id] = true
	}
	for id, u := range acc {
		see(u, id)
	}
	for id, u := range resvUser {
		see(u, id)
	}
	for _, r := range rows {
		see(r.UserID, r.OrderID)
	}
	var dupExtra int64
	var dupUsers []string
	for u, ids := range orderIDsOf {
		extra := int64(len(ids) - 1)
		if mark, ok := marks[u]; ok && !ids[mark] {
			extra++ // the mark names an order we never saw: the buyer still has two
		}
		if extra > 0 {
			dupExtra += extra
			dupUsers = append(dupUsers, fmt.Sprintf("buyer %d: %s", u, strings.Join(slices.Sorted(maps.Keys(ids)), ",")))
		}
	}
	if dupExtra > 0 {
		add(DuplicateBuyer, dupExtra, "buyers with more than one order for the item: %s", sample(dupUsers))
	}

	// stock row: the row and the live orders account for every unit.
	if d := rep.StockRow + liveN - S; d != 0 {
		add(StockRow, d, "stock row %d + live orders %d != %d units", rep.StockRow, liveN, S)
	}
	var dedMissing, dedNotRestored []string
	dedOf := make(map[string]deductionRow, len(deds))
	for _, dd := range deds {
		dedOf[dd.OrderID] = dd
		if !dd.Restored {
			rep.Deductions++
		}
	}
	for _, r := range rows {
		dd, ok := dedOf[r.OrderID]
		switch {
		case live(r.Status) && (!ok || dd.Restored):
			dedMissing = append(dedMissing, r.OrderID)
		case released(r.Status) && ok && !dd.Restored:
			dedNotRestored = append(dedNotRestored, r.OrderID)
		}
	}
	if n := len(dedMissing) + len(dedNotRestored); n > 0 {
		add(StockDeduction, int64(n), "%d live orders without a deduction (e.g. %s), %d released orders whose deduction was not restored (e.g. %s)",
			len(dedMissing), sample(dedMissing), len(dedNotRestored), sample(dedNotRestored))
	}

	// redis: stock_left and the live reservations account for every unit.
	if d := left + int64(len(resv)) - S; d != 0 {
		add(RedisStock, d, "redis stock_left %d + live reservations %d != %d units", left, len(resv), S)
	}
	var leaked, gone []string
	for id := range resvUser {
		r, ok := byID[id]
		if ok && released(r.Status) {
			leaked = append(leaked, id)
		}
	}
	for _, r := range rows {
		if _, ok := resvUser[r.OrderID]; live(r.Status) && !ok {
			gone = append(gone, r.OrderID)
		}
	}
	leakBy := int64(len(leaked))
	leakDetail := []string{}
	if len(leaked) > 0 {
		leakDetail = append(leakDetail, fmt.Sprintf("%d reservations held by released orders (e.g. %s)", len(leaked), sample(leaked)))
	}
	if in.AfterTimeouts {
		if pendingN > 0 || queuedN > 0 {
			add(PendingAfterTimeout, pendingN+queuedN, "%d orders PENDING_PAYMENT and %d QUEUED after every payment window closed", pendingN, queuedN)
		}
		if d := (S - paidN) - left; d > 0 {
			leakBy = max(leakBy, d)
			leakDetail = append(leakDetail, fmt.Sprintf("redis stock_left %d, want %d = %d units - %d paid", left, S-paidN, S, paidN))
		}
		if d := (S - paidN) - rep.StockRow; d > 0 {
			leakBy = max(leakBy, d)
			leakDetail = append(leakDetail, fmt.Sprintf("stock row %d, want %d = %d units - %d paid", rep.StockRow, S-paidN, S, paidN))
		}
	}
	if len(leakDetail) > 0 {
		add(LeakedUnit, leakBy, "%s", strings.Join(leakDetail, "; "))
	}
	if len(gone) > 0 {
		add(ReleasedLiveOrder, int64(len(gone)), "live orders whose redis reservation was released (unit sellable twice), e.g. %s", sample(gone))
	}

	// Temporal.
	if d.Workflows != nil {
		wfs, err := d.Workflows.ListOrderWorkflows(ctx, in.ItemID)
		if err != nil {
			return rep, fmt.Errorf("list workflows of item %d: %w", in.ItemID, err)
		}
		rep.WorkflowsChecked = true
		rep.WorkflowsByStatus = map[string]int64{}
		wfOf := make(map[string]Workflow, len(wfs))
		var stuck, uncomp []string
		for _, w := range wfs {
			rep.WorkflowsByStatus[w.Status]++
			wfOf[w.OrderID] = w
			r, ok := byID[w.OrderID]
			_, holds := resvUser[w.OrderID]
			switch w.Status {
			case "Running":
				// A saga whose order was paid or cancelled at the door runs
				// until its (paced) wake or, at the latest, its timer at
				// pay_by + grace: not stuck before that.
				waking := ok && r.Status.Final() && r.PayBy != nil && time.Now().Before(r.PayBy.Add(order.PayGrace+time.Minute))
				if !waking && (!ok || r.Status != order.StatusPendingPayment || in.AfterTimeouts) {
					stuck = append(stuck, w.WorkflowID)
				}
			case "Completed", "ContinuedAsNew":
			default: // Failed, Canceled, Terminated, TimedOut
				if holds || (ok && !released(r.Status)) {
					uncomp = append(uncomp, w.WorkflowID+"("+w.Status+")")
				}
			}
		}
		var missing []string
		for id := range acc {
			if _, ok := wfOf[id]; !ok {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			add(WorkflowMissing, int64(len(missing)), "accepted orders without a workflow, e.g. %s", sample(missing))
		}
		if len(stuck) > 0 {
			add(WorkflowStuck, int64(len(stuck)), "running workflows whose order is not waiting for payment, e.g. %s", sample(stuck))
		}
		if len(uncomp) > 0 {
			add(WorkflowUncompensated, int64(len(uncomp)), "closed-unsuccessfully workflows whose order still holds its unit, e.g. %s", sample(uncomp))
		}
	}
	sort.SliceStable(rep.Violations, func(i, j int) bool { return rep.Violations[i].Name < rep.Violations[j].Name })
	return rep, nil
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
