// Package ledger decides every money fact of an order: the order's, its
// payments' and its refunds' lives are one state machine, written down in
// Table. Storage asks it (and writes only what it allows, with the same
// from-states in its conditional updates); nothing else decides whether a
// payment pays an order, whether money must go back or who refunds.
//
// Every transition is monotonic: a payment that can never pay (mismatch,
// canceled) never becomes one that pays, a succeeded refund never goes back,
// a final order status moves only to REFUNDED once the provider confirmed the
// refund. An order is PAID by exactly one succeeded payment of its amount and
// currency, confirmed by the provider before pay_by.
package ledger

import (
	"slices"
	"time"

	"github.com/seckill/seckill/order"
)

// A payment's status (payments.status).
const (
	PaymentPending   = "pending"   // created at the provider, not settled yet
	PaymentSucceeded = "succeeded" // took the order's amount: pays the order if in time
	PaymentCanceled  = "canceled"  // closed at the provider: it can never take money
	// PaymentMismatch took money that can never pay the order: another
	// amount, currency or order than the row's, or a success the provider
	// reported after it had canceled the payment. Its money always goes back.
	PaymentMismatch = "mismatch"
)

// A refund's status (refunds.status). A row is written when a decision owes
// the money back; only the provider's confirmation makes it succeeded.
const (
	RefundPending   = "pending" // owed, asked or not, not confirmed yet
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed" // the provider refused it: raised, retried
)

// Fact names the life a transition belongs to.
type Fact string

const (
	FactOrder   Fact = "order"
	FactPayment Fact = "payment"
	FactRefund  Fact = "refund"
)

// New is the from-state of a row's creation.
const New = ""

// Transition is one allowed move of a fact and what makes it.
type Transition struct {
	Fact Fact
	From string // New: the row is created
	To   string
	By   string
}

// QueuedPaid is an order row QUEUED with paid_at: paid before the saga took
// its unit (the table's name for it; the row's status is QUEUED).
const QueuedPaid = "QUEUED+paid_at"

var (
	queued  = string(order.StatusQueued)
	pending = string(order.StatusPendingPayment)
	paid    = string(order.StatusPaid)
	cancel  = string(order.StatusCancelled)
	failed  = string(order.StatusFailed)
	refund  = string(order.StatusRefunded)
)

// Table is every transition the system makes; a move not in it is refused.
// docs/payments.md prints it (a docs test keeps the two equal).
var Table = []Transition{
	{FactOrder, New, queued, "the saga persists the order (PersistOrder)"},
	{FactOrder, New, QueuedPaid, "a door pay or a provider success before pay_by, the saga not there yet"},
	{FactOrder, New, cancel, "a buyer's cancel before the saga, or the saga's close of a row never written"},
	{FactOrder, queued, QueuedPaid, "a door pay or a provider success before pay_by"},
	{FactOrder, queued, pending, "the saga takes the unit from the stock row (DecrementStock)"},
	{FactOrder, QueuedPaid, paid, "the saga takes the unit of a paid order (DecrementStock), even past pay_by"},
	{FactOrder, pending, paid, "a door pay or a provider success before pay_by"},
	{FactOrder, queued, cancel, "a buyer's cancel, or the close at pay_by + grace"},
	{FactOrder, pending, cancel, "a buyer's cancel, or the close at pay_by + grace"},
	{FactOrder, queued, failed, "a step failed for good"},
	{FactOrder, pending, failed, "a step failed for good"},
	{FactOrder, QueuedPaid, refund, "the stock row had no unit for it (a phantom unit): its money goes back"},
	{FactOrder, cancel, refund, "the provider confirmed the refund of a payment it kept"},
	{FactOrder, failed, refund, "the provider confirmed the refund of a payment it kept"},
	{FactOrder, paid, refund, "support's refund, once the provider confirmed it (the unit goes back)"},

	{FactPayment, New, PaymentPending, "checkout: committed before the provider is asked"},
	{FactPayment, PaymentPending, PaymentSucceeded, "the provider's success of the row's amount, currency and order"},
	{FactPayment, PaymentPending, PaymentMismatch, "the provider's success of another amount, currency or order"},
	{FactPayment, PaymentPending, PaymentCanceled, "the provider canceled it (cancel-first at the close, or its notification)"},
	{FactPayment, PaymentCanceled, PaymentMismatch, "a success the provider reports after its cancel: money taken that pays nothing"},

	{FactRefund, New, RefundPending, "a decision owes the money back (who asked and why recorded)"},
	{FactRefund, RefundPending, RefundSucceeded, "the provider confirmed it (answer, lookup or notification)"},
	{FactRefund, RefundPending, RefundFailed, "the provider refused it"},
	{FactRefund, RefundFailed, RefundPending, "asked again"},
	{FactRefund, RefundFailed, RefundSucceeded, "a retry the provider confirmed"},
}

// Allowed reports whether Table holds the move; staying put is always allowed.
func Allowed(f Fact, from, to string) bool {
	if from == to {
		return true
	}
	return slices.ContainsFunc(Table, func(t Transition) bool { return t.Fact == f && t.From == from && t.To == to })
}

// From lists the states a fact may reach to from (to itself included): the
// from-states of a conditional update.
func From(f Fact, to string) []string {
	out := []string{to}
	for _, t := range Table {
		if t.Fact == f && t.To == to && t.From != New && !slices.Contains(out, t.From) {
			out = append(out, t.From)
		}
	}
	return out
}

// Payment is what the ledger needs of a payment row.
type Payment struct {
	OrderID     string
	UserID      int64
	Amount      int64 // minor units
	Currency    string
	Status      string
	PayBy       time.Time
	SucceededAt *time.Time
}

// Order is what the ledger needs of an order row.
type Order struct {
	OrderID string
	UserID  int64
	Status  order.Status
	Reason  string
	PayBy   *time.Time
	PaidAt  *time.Time
}

// State is the order row's state as Table names it.
func (o Order) State() string {
	if o.Status == order.StatusQueued && o.PaidAt != nil {
		return QueuedPaid
	}
	return string(o.Status)
}

// Success is a provider's word that a payment took money.
type Success struct {
	OrderID  string // the payment's metadata; empty: not said
	Amount   int64
	Currency string
	At       time.Time // when the provider says it happened
}

// Matches reports whether s is a success of p's amount and currency, for its order.
func Matches(p Payment, s Success) bool {
	return s.Amount == p.Amount && s.Currency == p.Currency && (s.OrderID == "" || s.OrderID == p.OrderID)
}

// OnSuccess is the payment status after the provider's success s. A payment
// that took money keeps its first verdict (a contradiction never flips a
// mismatch into a success, nor a success into a mismatch).
func OnSuccess(p Payment, s Success) string {
	switch p.Status {
	case PaymentPending:
		if Matches(p, s) {
			return PaymentSucceeded
		}
		return PaymentMismatch
	case PaymentCanceled:
		return PaymentMismatch
	}
	return p.Status
}

// OnCancel is the payment status after the provider canceled it.
func OnCancel(p Payment) string {
	if p.Status == PaymentPending {
		return PaymentCanceled
	}
	return p.Status
}

// Took reports whether the payment took money.
func Took(p Payment) bool { return p.Status == PaymentSucceeded || p.Status == PaymentMismatch }

// InTime reports whether the provider confirmed p's success before its pay_by.
func InTime(p Payment) bool {
	return p.Status == PaymentSucceeded && p.SucceededAt != nil && p.SucceededAt.Before(p.PayBy)
}

// Pays reports whether p, succeeded at at, pays the order row o now: a
// succeeded payment of o's buyer, o open (QUEUED or PENDING_PAYMENT) and
// unpaid, at before o's pay_by. The store's conditional update states the
// same condition (store.payableWhere).
func Pays(p Payment, o Order, at time.Time) bool {
	return p.Status == PaymentSucceeded && o.UserID == p.UserID && o.PaidAt == nil && o.PayBy != nil && o.PayBy.After(at) &&
		(o.Status == order.StatusPendingPayment || o.Status == order.StatusQueued)
}

// PaidWith reports whether p is the payment that paid o: succeeded, o's
// buyer, its success o's paid_at (what support refunds).
func PaidWith(p Payment, o Order) bool {
	return p.Status == PaymentSucceeded && p.SucceededAt != nil && o.PaidAt != nil &&
		o.PaidAt.Equal(*p.SucceededAt) && o.UserID == p.UserID && o.OrderID == p.OrderID
}

// RefundDue reports whether p's money must go back, given its order's row
// (found false: none): a mismatch always; a success when the order closed
// without its unit, belongs to another buyer, was paid by another payment
// (its paid_at is not p's success), or is open but p succeeded at or after
// pay_by (it can never pay it). A PAID row without paid_at keeps p: it may
// be what paid it. A success confirmed before pay_by of an order not
// written yet, or still open, is owed the unit, not a refund.
func RefundDue(p Payment, o Order, found bool) bool {
	switch {
	case p.Status == PaymentMismatch:
		return true
	case p.Status != PaymentSucceeded || p.SucceededAt == nil:
		return false
	case !found:
		return !p.SucceededAt.Before(p.PayBy)
	case o.UserID != p.UserID:
		return true
	case o.Status == order.StatusCancelled, o.Status == order.StatusFailed, o.Status == order.StatusRefunded:
		return true
	case o.Status == order.StatusPaid || o.PaidAt != nil:
		return o.PaidAt != nil && !o.PaidAt.Equal(*p.SucceededAt)
	}
	return !p.SucceededAt.Before(p.PayBy)
}

// Order reasons under which a payment confirmed in time may end without its
// unit: the buyer cancelled first, support refunded it, or the stock row
// never had the unit (a phantom unit of a Redis failover).
var givenUp = []string{order.ReasonBuyerCancelled, order.ReasonSupportRefund, order.ReasonStockExhausted}

// Owed reports whether p, confirmed by the provider before pay_by, is owed
// its order's unit and the order does not hold it: the promise "a payment
// confirmed in time wins, whatever blinked meanwhile" broken (a violation
// the checker and reconcile report). closed: the order can no longer become
// PAID by itself (its saga ended, or the sale is over).
func Owed(p Payment, o Order, found, closed bool) bool {
	if !InTime(p) || found && o.UserID != p.UserID {
		return false
	}
	switch {
	case !found:
		return closed
	case o.Status == order.StatusPaid, o.State() == QueuedPaid: // paid, or settling
		return false
	case o.Status == order.StatusQueued || o.Status == order.StatusPendingPayment:
		return closed
	}
	return !givenUpFor(o)
}

func givenUpFor(o Order) bool {
	for _, r := range givenUp {
		if o.Reason == r || len(o.Reason) > len(r) && o.Reason[:len(r)+1] == r+":" {
			return true
		}
	}
	return false
}
