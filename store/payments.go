package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/ledger"
	"github.com/seckill/seckill/order"
)

// Payment is a provider payment of an order (table payments), created at
// checkout. UserID, ItemID and PayBy are the order's, proven at checkout.
type Payment struct {
	ID                int64      `gorm:"column:id;primaryKey" json:"id"`
	OrderID           string     `gorm:"column:order_id" json:"order_id"`
	UserID            int64      `gorm:"column:user_id" json:"user_id"`
	ItemID            int64      `gorm:"column:item_id" json:"item_id"`
	Provider          string     `gorm:"column:provider" json:"provider"`
	ProviderPaymentID string     `gorm:"column:provider_payment_id" json:"provider_payment_id"` // Placeholder until the provider names it
	IdempotencyKey    string     `gorm:"column:idempotency_key" json:"idempotency_key,omitempty"`
	Amount            int64      `gorm:"column:amount" json:"amount"` // minor units
	Currency          string     `gorm:"column:currency" json:"currency"`
	Name              string     `gorm:"column:name" json:"name,omitempty"` // what the buyer pays for, as sent
	Status            string     `gorm:"column:status" json:"status"`
	CheckoutURL       string     `gorm:"column:checkout_url" json:"checkout_url,omitempty"`
	ReturnURL         string     `gorm:"column:return_url" json:"return_url,omitempty"`
	PayBy             time.Time  `gorm:"column:pay_by" json:"pay_by"`
	ExpiresAt         *time.Time `gorm:"column:expires_at" json:"expires_at,omitempty"` // the provider checkout's own expiry, as sent
	SucceededAt       *time.Time `gorm:"column:succeeded_at" json:"succeeded_at"`
	CreatedAt         time.Time  `gorm:"column:created_at" json:"created_at"`
	UpdatedAt         time.Time  `gorm:"column:updated_at" json:"updated_at"`
}

func (Payment) TableName() string { return "payments" }

// A payment row's status: the ledger's (ledger.Table says how it moves).
const (
	PaymentPending   = ledger.PaymentPending
	PaymentSucceeded = ledger.PaymentSucceeded
	PaymentCanceled  = ledger.PaymentCanceled
	PaymentMismatch  = ledger.PaymentMismatch
)

// Facts is what the ledger judges of p.
func (p Payment) Facts() ledger.Payment {
	return ledger.Payment{OrderID: p.OrderID, UserID: p.UserID, Amount: p.Amount, Currency: p.Currency,
		Status: p.Status, PayBy: p.PayBy, SucceededAt: p.SucceededAt}
}

// SavePayment records p as pending, or returns the row that already holds
// its provider payment id (a second checkout of the order).
func (s *Store) SavePayment(ctx context.Context, p Payment) (Payment, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	p.ID, p.Status, p.SucceededAt, p.CreatedAt, p.UpdatedAt = 0, PaymentPending, nil, now, now
	p.PayBy = p.PayBy.UTC().Truncate(time.Millisecond)
	db := s.db.WithContext(ctx)
	err := db.Omit("id").Create(&p).Error
	switch {
	case err == nil:
		return p, nil
	case !isDuplicate(err):
		return Payment{}, fmt.Errorf("record payment %s of order %s: %w", p.ProviderPaymentID, p.OrderID, err)
	}
	return take[Payment](db, order.ErrNotFound, "payment "+p.ProviderPaymentID,
		"provider = ? AND provider_payment_id = ?", p.Provider, p.ProviderPaymentID)
}

// OrderPayment is the order's latest payment through provider
// (order.ErrNotFound when it has none).
func (s *Store) OrderPayment(ctx context.Context, orderID, provider string) (Payment, error) {
	var p Payment
	err := s.db.WithContext(ctx).Where("order_id = ? AND provider = ?", orderID, provider).Order("id DESC").Take(&p).Error
	switch {
	case errors.Is(err, gorm.ErrRecordNotFound):
		return p, fmt.Errorf("payment of order %s: %w", orderID, order.ErrNotFound)
	case err != nil:
		return p, fmt.Errorf("read payment of order %s: %w", orderID, err)
	}
	return p, nil
}

// PaymentEvent is a verified provider notification about a payment.
type PaymentEvent struct {
	ID        string // the provider's event id
	Type      string // the shop's: payment_succeeded, payment_canceled, payment_failed
	Provider  string
	PaymentID string
	OrderID   string // the payment's metadata names it: another than the row's is a mismatch
	Amount    int64
	Currency  string
	At        time.Time // when the provider says it happened
}

// Verdict is what the door made of a payment event.
type Verdict string

const (
	VerdictPaid        Verdict = "paid"            // the event paid the order
	VerdictRepeated    Verdict = "repeated"        // its event id was taken before: nothing done
	VerdictUnknown     Verdict = "unknown_payment" // no such payment here
	VerdictMismatch    Verdict = "mismatch"        // another amount, currency or order: recorded, not PAID
	VerdictLate        Verdict = "late"            // succeeded at or after pay_by: not PAID
	VerdictNotPayable  Verdict = "not_payable"     // the order is closed or not the payment's
	VerdictAlreadyPaid Verdict = "already_paid"    // the order was paid already
	VerdictRecorded    Verdict = "recorded"        // a cancel or failure, recorded
)

// EventResult is a payment event's verdict, its payment and, when it paid,
// the order row as it is now.
type EventResult struct {
	Verdict Verdict
	Payment Payment
	Order   Order
}

// afterEventInsert runs between an event's insert and its decision (tests
// make it fail: neither may remain).
var afterEventInsert = func(*gorm.DB, PaymentEvent) error { return nil }

// afterPayMissed runs when a pay's UPDATE moved no row, before the order
// row is read (tests commit the saga's insert there).
var afterPayMissed = func(orderID string) {}

// ApplyPaymentEvent takes a payment event in one transaction: the event id
// is inserted (a repeat is VerdictRepeated, nothing else done), the payment
// row locked and updated, and a success the provider timestamps before
// pay_by pays the order as a door pay does (RecordPayment with early, or
// InsertEarly's row when the saga has not persisted it yet). Nothing is
// written unless all of it commits.
func (s *Store) ApplyPaymentEvent(ctx context.Context, e PaymentEvent) (EventResult, error) {
	var out EventResult
	err := retryDeadlock(ctx, func() error {
		return s.eventTx(ctx, func(tx *gorm.DB) (err error) {
			out, err = applyEvent(tx, e)
			return err
		})
	})
	if err != nil {
		return EventResult{}, fmt.Errorf("apply payment event %s: %w", e.ID, err)
	}
	return out, nil
}

// ApplyPaymentEvents takes es in one transaction, each decided as
// ApplyPaymentEvent would, in turn (an event id repeated within es is
// VerdictRepeated). On an error nothing is written: apply them one by one.
func (s *Store) ApplyPaymentEvents(ctx context.Context, es []PaymentEvent) ([]EventResult, error) {
	var out []EventResult
	err := s.eventTx(ctx, func(tx *gorm.DB) (err error) {
		out, err = applyEvents(tx, es)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("apply %d payment events: %w", len(es), err)
	}
	return out, nil
}

// eventTx runs fn in a READ COMMITTED transaction, as CloseOrder: the
// locking read of an order row not persisted yet takes no gap lock for the
// saga's insert to wait on.
func (s *Store) eventTx(ctx context.Context, fn func(tx *gorm.DB) error) error {
	return s.db.WithContext(ctx).Transaction(fn, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
}

func applyEvent(tx *gorm.DB, e PaymentEvent) (EventResult, error) {
	err := tx.Exec("INSERT INTO payment_events (event_id, type, payment_id, received_at) VALUES (?, ?, ?, ?)",
		e.ID, e.Type, e.PaymentID, time.Now().UTC().Truncate(time.Millisecond)).Error
	switch {
	case isDuplicate(err):
		return EventResult{Verdict: VerdictRepeated}, nil
	case err != nil:
		return EventResult{}, fmt.Errorf("insert event: %w", err)
	}
	if err := afterEventInsert(tx, e); err != nil {
		return EventResult{}, err
	}
	p, err := take[Payment](forUpdate(tx), order.ErrNotFound, "payment "+e.PaymentID,
		"provider = ? AND provider_payment_id = ?", e.Provider, e.PaymentID)
	if errors.Is(err, order.ErrNotFound) && e.OrderID != "" {
		p, err = unnamed(tx, e.Provider, e.OrderID, e.PaymentID) // opened, its id not recorded yet
	}
	if errors.Is(err, order.ErrNotFound) {
		return EventResult{Verdict: VerdictUnknown}, nil // the event stays: a resend is dropped
	}
	if err != nil {
		return EventResult{}, err
	}
	return decide(tx, p, e)
}

// applyEvents is applyEvent over es in one transaction: the event ids taken
// read and the new ones inserted in one statement each, their payments
// locked in one, then each decided in turn on the rows as the ones before
// it left them.
func applyEvents(tx *gorm.DB, es []PaymentEvent) ([]EventResult, error) {
	out := make([]EventResult, len(es))
	fresh, err := insertFresh(tx, es, out)
	if err != nil || len(fresh) == 0 {
		return out, err
	}
	rows, err := lockPayments(tx, es, fresh)
	if err != nil {
		return nil, err
	}
	for _, i := range fresh {
		if err := afterEventInsert(tx, es[i]); err != nil {
			return nil, err
		}
	}
	plain, rest := splitPlain(es, fresh, rows)
	if err := succeedAll(tx, es, plain, out, func(e PaymentEvent) Payment { return rows[paymentKeyOf(e)] }); err != nil {
		return nil, err
	}
	for _, i := range plain {
		rows[paymentKeyOf(es[i])] = out[i].Payment
	}
	for _, i := range rest {
		e := es[i]
		p, ok := rows[paymentKeyOf(e)]
		if !ok && e.OrderID != "" {
			var err error
			if p, err = unnamed(tx, e.Provider, e.OrderID, e.PaymentID); err == nil {
				ok = true
			} else if !errors.Is(err, order.ErrNotFound) {
				return nil, err
			}
		}
		if !ok {
			out[i].Verdict = VerdictUnknown
			continue
		}
		r, err := decide(tx, p, e)
		if err != nil {
			return nil, err
		}
		out[i], rows[paymentKeyOf(e)] = r, r.Payment
		if e.Type == "payment_canceled" && p.Status == PaymentPending {
			rows[paymentKeyOf(e)] = withStatus(p, PaymentCanceled)
		}
	}
	return out, nil
}

// paymentKey names a payment as its provider does.
type paymentKey struct{ provider, id string }

func paymentKeyOf(e PaymentEvent) paymentKey { return paymentKey{e.Provider, e.PaymentID} }

// insertFresh inserts the events of es not taken before (nor earlier in es)
// in one statement and returns their indexes; the others are marked
// repeated in out. A duplicate key here is an event inserted since the
// read: the caller then applies the batch one by one.
func insertFresh(tx *gorm.DB, es []PaymentEvent, out []EventResult) ([]int, error) {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	var taken []string
	if err := tx.Raw("SELECT event_id FROM payment_events WHERE event_id IN ?", ids).Scan(&taken).Error; err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	seen := make(map[string]bool, len(es))
	for _, id := range taken {
		seen[id] = true
	}
	var fresh []int
	var args []any
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, e := range es {
		if seen[e.ID] {
			out[i].Verdict = VerdictRepeated
			continue
		}
		seen[e.ID] = true
		fresh = append(fresh, i)
		args = append(args, e.ID, e.Type, e.PaymentID, now)
	}
	if len(fresh) == 0 {
		return nil, nil
	}
	if err := tx.Exec("INSERT INTO payment_events (event_id, type, payment_id, received_at) VALUES (?, ?, ?, ?)"+
		strings.Repeat(", (?, ?, ?, ?)", len(fresh)-1), args...).Error; err != nil {
		return nil, fmt.Errorf("insert %d events: %w", len(fresh), err)
	}
	return fresh, nil
}

// lockPayments locks the payment rows the fresh events name, one
// statement per provider.
func lockPayments(tx *gorm.DB, es []PaymentEvent, fresh []int) (map[paymentKey]Payment, error) {
	byProvider := map[string][]string{}
	for _, i := range fresh {
		byProvider[es[i].Provider] = append(byProvider[es[i].Provider], es[i].PaymentID)
	}
	rows := map[paymentKey]Payment{}
	for prov, pids := range byProvider {
		var ps []Payment
		if err := forUpdate(tx).Where("provider = ? AND provider_payment_id IN ?", prov, pids).Order("id").Find(&ps).Error; err != nil {
			return nil, fmt.Errorf("read payments: %w", err)
		}
		for _, p := range ps {
			rows[paymentKey{p.Provider, p.ProviderPaymentID}] = p
		}
	}
	return rows, nil
}

// splitPlain splits the fresh events into the first matching success of
// each pending payment whose order no other event of the batch touches
// (paid together) and the rest (decided in turn, in arrival order).
func splitPlain(es []PaymentEvent, fresh []int, rows map[paymentKey]Payment) (plain, rest []int) {
	first := map[paymentKey]bool{}
	for _, i := range fresh {
		e := es[i]
		k := paymentKeyOf(e)
		p, ok := rows[k]
		if ok && !first[k] && e.Type == "payment_succeeded" && p.Status == PaymentPending && matches(p, e) {
			plain = append(plain, i)
		} else {
			rest = append(rest, i)
		}
		first[k] = true
	}
	touched := map[string]bool{}
	for _, i := range rest {
		if p, ok := rows[paymentKeyOf(es[i])]; ok {
			touched[p.OrderID] = true
		}
	}
	plain = slices.DeleteFunc(plain, func(i int) bool {
		if touched[rows[paymentKeyOf(es[i])].OrderID] {
			rest = append(rest, i)
			return true
		}
		return false
	})
	slices.Sort(rest)
	return plain, rest
}

func withStatus(p Payment, status string) Payment { p.Status = status; return p }

// decide is e's verdict on its payment row p, locked in tx. A success the
// order cannot take owes its refund: the row is written here, in the
// decision's transaction.
func decide(tx *gorm.DB, p Payment, e PaymentEvent) (EventResult, error) {
	out := EventResult{Verdict: VerdictRecorded, Payment: p}
	var err error
	switch e.Type {
	case "payment_succeeded":
		out, err = succeed(tx, p, e)
		if err == nil && owes(out.Verdict) {
			err = oweAfter(tx, p.OrderID, "payment "+string(out.Verdict), AskedByNotification)
		}
		return out, err
	case "payment_canceled":
		if to := ledger.OnCancel(p.Facts()); to != p.Status {
			err = movePayment(tx, p, to, nil)
		}
	}
	return out, err
}

// matches: e is a success of p's amount and currency, for its order.
func matches(p Payment, e PaymentEvent) bool { return ledger.Matches(p.Facts(), e.success()) }

func (e PaymentEvent) success() ledger.Success {
	return ledger.Success{OrderID: e.OrderID, Amount: e.Amount, Currency: e.Currency, At: e.At}
}

// movePayment writes the ledger's move of p to status, conditional on a
// from-state the ledger allows (a row that moved meanwhile is an error: the
// caller holds its lock). succeededAt is kept if one is recorded already.
func movePayment(tx *gorm.DB, p Payment, to string, succeededAt *time.Time) error {
	if !ledger.Allowed(ledger.FactPayment, p.Status, to) {
		return fmt.Errorf("payment %s: %s to %s: %w", p.ProviderPaymentID, p.Status, to, ErrRefusedMove)
	}
	res := tx.Exec("UPDATE payments SET status = ?, succeeded_at = COALESCE(succeeded_at, ?) WHERE id = ? AND status IN ?",
		to, succeededAt, p.ID, ledger.From(ledger.FactPayment, to))
	if res.Error == nil && res.RowsAffected == 0 {
		res.Error = fmt.Errorf("payment %s moved meanwhile: %w", p.ProviderPaymentID, ErrRefusedMove)
	}
	if res.Error != nil {
		return fmt.Errorf("record payment %s %s: %w", p.ProviderPaymentID, to, res.Error)
	}
	return nil
}

// ErrRefusedMove: a write the ledger's table does not allow.
var ErrRefusedMove = errors.New("the ledger does not allow this move")

// succeedAll is succeed for the events es[i] of idx, each the first success
// of a pending payment (of) it matches, in a few statements for them all:
// the payments marked, their orders locked, the payable ones paid by one
// conditional UPDATE (the door's); any other is decided alone. Its results
// go to out.
func succeedAll(tx *gorm.DB, es []PaymentEvent, idx []int, out []EventResult, of func(PaymentEvent) Payment) error {
	if len(idx) == 0 {
		return nil
	}
	var whenPay, whenOrder, whenUser []any
	var payIDs []int64
	var orderIDs []string
	ats := make(map[int]time.Time, len(idx))
	for _, i := range idx {
		p, at := of(es[i]), es[i].At.UTC().Truncate(time.Millisecond)
		whenPay, payIDs, orderIDs = append(whenPay, p.ID, at), append(payIDs, p.ID), append(orderIDs, p.OrderID)
		ats[i] = at
		if p.Status = PaymentSucceeded; p.SucceededAt == nil {
			p.SucceededAt = &at
		}
		out[i] = EventResult{Payment: p}
	}
	if err := tx.Exec("UPDATE payments SET status = ?, succeeded_at = COALESCE(succeeded_at, CASE id"+strings.Repeat(" WHEN ? THEN ?", len(idx))+" END) WHERE id IN ? AND status = ?",
		append(append([]any{PaymentSucceeded}, whenPay...), payIDs, PaymentPending)...).Error; err != nil {
		return fmt.Errorf("record %d payments succeeded: %w", len(idx), err)
	}
	var rows []Order
	if err := forUpdate(tx).Where("order_id IN ?", orderIDs).Order("order_id").Find(&rows).Error; err != nil {
		return fmt.Errorf("read %d orders: %w", len(orderIDs), err)
	}
	byID := map[string]Order{}
	for _, o := range rows {
		byID[o.OrderID] = o
	}
	var payable []string
	for _, i := range idx {
		p, at := out[i].Payment, ats[i]
		o, ok := byID[p.OrderID]
		switch {
		case !ok: // no row yet: the row a door pay writes, alone
			v, row, err := payOrder(tx, p, at)
			if err != nil {
				return err
			}
			out[i].Verdict, out[i].Order = v, row
		case o.UserID == p.UserID && o.PaidAt == nil && o.PayBy != nil && o.PayBy.After(at) &&
			(o.Status == order.StatusPendingPayment || o.Status == order.StatusQueued):
			payable = append(payable, o.OrderID)
			whenOrder, whenUser = append(whenOrder, o.OrderID, at), append(whenUser, o.OrderID, o.UserID)
		default:
			out[i].Verdict, out[i].Order = judged(o, p, at), o
		}
		if owes(out[i].Verdict) {
			if err := oweAfter(tx, p.OrderID, "payment "+string(out[i].Verdict), AskedByNotification); err != nil {
				return err
			}
		}
	}
	if len(payable) == 0 {
		return nil
	}
	// The door's pay, guarded as payOrder's: a row it does not move fails
	// the batch, which is then decided one event at a time.
	when := strings.Repeat(" WHEN ? THEN ?", len(payable))
	args := append(append(append(append([]any{}, whenOrder...), order.StatusPendingPayment, order.StatusPaid), whenUser...),
		payable, []order.Status{order.StatusPendingPayment, order.StatusQueued})
	args = append(args, whenOrder...)
	res := tx.Exec("UPDATE seckill_order SET paid_at = CASE order_id"+when+" END, reason = '', status = IF(status = ?, ?, status) "+
		"WHERE user_id = CASE order_id"+when+" END AND order_id IN ? AND status IN ? AND paid_at IS NULL AND pay_by > CASE order_id"+when+" END", args...)
	if res.Error != nil || res.RowsAffected != int64(len(payable)) {
		return fmt.Errorf("pay %d orders: %d moved: %w", len(payable), res.RowsAffected, errors.Join(res.Error, errNotMoved))
	}
	rows = nil
	if err := tx.Where("order_id IN ?", payable).Find(&rows).Error; err != nil {
		return fmt.Errorf("read %d paid orders: %w", len(payable), err)
	}
	for _, o := range rows {
		byID[o.OrderID] = o
		if o.Status == order.StatusPaid { // the shop's event, as payOrder's (a QUEUED order stays QUEUED)
			if err := recordEvent(tx, o.OrderID); err != nil {
				return err
			}
		}
	}
	for _, i := range idx {
		if out[i].Verdict == "" {
			out[i].Verdict, out[i].Order = VerdictPaid, byID[out[i].Payment.OrderID]
		}
	}
	return nil
}

// owes reports whether a success's verdict may leave money to give back.
func owes(v Verdict) bool {
	return v == VerdictMismatch || v == VerdictLate || v == VerdictNotPayable || v == VerdictAlreadyPaid
}

// errNotMoved: a batch's pay moved fewer rows than it judged payable.
var errNotMoved = errors.New("an order the batch judged payable did not move")

// succeed records the provider's success on p as the ledger moves it and
// pays its order if in time. A payment that cannot pay (a mismatch, a
// success after its cancel) never pays, whatever arrives after.
func succeed(tx *gorm.DB, p Payment, e PaymentEvent) (EventResult, error) {
	at := e.At.UTC().Truncate(time.Millisecond)
	to := ledger.OnSuccess(p.Facts(), e.success())
	if to != p.Status || p.SucceededAt == nil {
		if err := movePayment(tx, p, to, &at); err != nil {
			return EventResult{}, err
		}
		if p.Status = to; p.SucceededAt == nil {
			p.SucceededAt = &at
		}
	}
	out := EventResult{Verdict: VerdictMismatch, Payment: p}
	if p.Status != PaymentSucceeded {
		return out, nil
	}
	// The payment's own success time decides (a second event of the same
	// success, or one with another timestamp, cannot move it).
	v, row, err := payOrder(tx, p, *p.SucceededAt)
	out.Verdict, out.Order = v, row
	return out, err
}

// payOrder is the door's pay of p's order at at, inside tx.
func payOrder(tx *gorm.DB, p Payment, at time.Time) (Verdict, Order, error) {
	for try := 0; ; try++ {
		res := tx.Exec("UPDATE seckill_order SET paid_at = ?, reason = '', status = IF(status = ?, ?, status) "+
			"WHERE order_id = ? AND user_id = ? AND status IN ? AND paid_at IS NULL AND pay_by > ?",
			at, order.StatusPendingPayment, order.StatusPaid, p.OrderID, p.UserID,
			[]order.Status{order.StatusPendingPayment, order.StatusQueued}, at)
		if res.Error != nil {
			return "", Order{}, fmt.Errorf("pay order %s: %w", p.OrderID, res.Error)
		}
		if res.RowsAffected == 0 {
			afterPayMissed(p.OrderID)
		}
		row, err := orderRow(forUpdate(tx), p.OrderID)
		switch {
		case err == nil && res.RowsAffected == 1:
			if row.Status == order.StatusPaid { // a QUEUED order stays QUEUED
				err = recordEvent(tx, p.OrderID)
			}
			return VerdictPaid, row, err
		case err == nil && try < 2 && ledger.Pays(p.Facts(), row.Facts(), at):
			// The row was committed after the UPDATE looked (the saga's
			// insert: READ COMMITTED's UPDATE of a missing row takes no gap
			// lock) and this read locked it: the pay moves it now.
			continue
		case err == nil:
			return judged(row, p, at), row, nil
		case !errors.Is(err, order.ErrNotFound):
			return "", Order{}, err
		case !at.Before(p.PayBy):
			return VerdictLate, Order{}, nil
		}
		// No row yet (the saga lags): the row a door pay writes.
		payBy := p.PayBy
		row = Order{OrderID: p.OrderID, UserID: p.UserID, ItemID: p.ItemID, Status: order.StatusQueued,
			PayBy: &payBy, PaidAt: &at, CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
		row.UpdatedAt = row.CreatedAt
		err = tx.Omit("id").Create(&row).Error
		switch {
		case err == nil:
			return VerdictPaid, row, nil
		case !isDuplicate(err):
			return "", Order{}, fmt.Errorf("insert paid order %s: %w", p.OrderID, err)
		case try > 0:
			return VerdictNotPayable, Order{}, nil // the buyer's other order holds the item
		}
		// The saga's row landed meanwhile: decide on it.
	}
}

// judged says why a row the pay did not move was not paid.
func judged(row Order, p Payment, at time.Time) Verdict {
	switch {
	case row.UserID != p.UserID:
		return VerdictNotPayable
	case row.Status == order.StatusPaid || row.PaidQueued():
		return VerdictAlreadyPaid
	case row.PayBy != nil && !at.Before(*row.PayBy):
		return VerdictLate
	}
	return VerdictNotPayable
}
