package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
)

// Payment is a provider payment of an order (table payments), created at
// checkout. UserID, ItemID and PayBy are the order's, proven at checkout.
type Payment struct {
	ID                int64      `gorm:"column:id;primaryKey"`
	OrderID           string     `gorm:"column:order_id"`
	UserID            int64      `gorm:"column:user_id"`
	ItemID            int64      `gorm:"column:item_id"`
	Provider          string     `gorm:"column:provider"`
	ProviderPaymentID string     `gorm:"column:provider_payment_id"`
	Amount            int64      `gorm:"column:amount"` // minor units
	Currency          string     `gorm:"column:currency"`
	Status            string     `gorm:"column:status"`
	CheckoutURL       string     `gorm:"column:checkout_url"`
	PayBy             time.Time  `gorm:"column:pay_by"`
	SucceededAt       *time.Time `gorm:"column:succeeded_at"`
	CreatedAt         time.Time  `gorm:"column:created_at"`
	UpdatedAt         time.Time  `gorm:"column:updated_at"`
}

func (Payment) TableName() string { return "payments" }

// A payment row's status. Mismatch: it succeeded with another amount or
// currency than the row's; the order is never PAID by it.
const (
	PaymentPending   = "pending"
	PaymentSucceeded = "succeeded"
	PaymentCanceled  = "canceled"
	PaymentMismatch  = "mismatch"
)

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

// afterEventInsert runs between the event's insert and the decision (tests
// make it fail: neither may remain).
var afterEventInsert = func(*gorm.DB) error { return nil }

// ApplyPaymentEvent takes a payment event in one transaction: the event id
// is inserted (a repeat is VerdictRepeated, nothing else done), the payment
// row locked and updated, and a success the provider timestamps before
// pay_by pays the order as a door pay does (RecordPayment with early, or
// InsertEarly's row when the saga has not persisted it yet). Nothing is
// written unless all of it commits.
func (s *Store) ApplyPaymentEvent(ctx context.Context, e PaymentEvent) (EventResult, error) {
	var out EventResult
	err := retryDeadlock(ctx, func() error {
		// READ COMMITTED, as CloseOrder: the locking read of an order row
		// not persisted yet takes no gap lock for the saga's insert to wait on.
		return s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) (err error) {
			out, err = applyEvent(tx, e)
			return err
		}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	})
	if err != nil {
		return EventResult{}, fmt.Errorf("apply payment event %s: %w", e.ID, err)
	}
	return out, nil
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
	if err := afterEventInsert(tx); err != nil {
		return EventResult{}, err
	}
	p, err := take[Payment](forUpdate(tx), order.ErrNotFound, "payment "+e.PaymentID,
		"provider = ? AND provider_payment_id = ?", e.Provider, e.PaymentID)
	if errors.Is(err, order.ErrNotFound) {
		return EventResult{Verdict: VerdictUnknown}, nil // the event stays: a resend is dropped
	}
	if err != nil {
		return EventResult{}, err
	}
	out := EventResult{Verdict: VerdictRecorded, Payment: p}
	switch e.Type {
	case "payment_succeeded":
		return succeed(tx, p, e)
	case "payment_canceled":
		err = tx.Exec("UPDATE payments SET status = ? WHERE id = ? AND status = ?", PaymentCanceled, p.ID, PaymentPending).Error
	}
	return out, err
}

// succeed records the payment's success and pays its order if in time.
func succeed(tx *gorm.DB, p Payment, e PaymentEvent) (EventResult, error) {
	at := e.At.UTC().Truncate(time.Millisecond)
	status := PaymentSucceeded
	if e.Amount != p.Amount || e.Currency != p.Currency || e.OrderID != "" && e.OrderID != p.OrderID {
		status = PaymentMismatch
	}
	if err := tx.Exec("UPDATE payments SET status = ?, succeeded_at = COALESCE(succeeded_at, ?) WHERE id = ?", status, at, p.ID).Error; err != nil {
		return EventResult{}, fmt.Errorf("record payment %s %s: %w", p.ProviderPaymentID, status, err)
	}
	p.Status = status
	if p.SucceededAt == nil {
		p.SucceededAt = &at
	}
	out := EventResult{Verdict: VerdictMismatch, Payment: p}
	if status == PaymentMismatch {
		return out, nil
	}
	v, row, err := payOrder(tx, p, at)
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
		row, err := orderRow(forUpdate(tx), p.OrderID)
		switch {
		case err == nil && res.RowsAffected == 1:
			if row.Status == order.StatusPaid { // a QUEUED order stays QUEUED
				err = recordEvent(tx, p.OrderID)
			}
			return VerdictPaid, row, err
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
