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

// Refund is a refund of a payment through its provider (table refunds, one
// per payment), made by the saga's RefundPayment step.
type Refund struct {
	ID                int64     `gorm:"column:id;primaryKey" json:"id"`
	OrderID           string    `gorm:"column:order_id" json:"order_id"`
	PaymentID         int64     `gorm:"column:payment_id" json:"payment_id"` // payments.id
	ProviderPaymentID string    `gorm:"column:provider_payment_id" json:"provider_payment_id"`
	ProviderRefundID  string    `gorm:"column:provider_refund_id" json:"provider_refund_id"`
	Amount            int64     `gorm:"column:amount" json:"amount"`
	Currency          string    `gorm:"column:currency" json:"currency"`
	Status            string    `gorm:"column:status" json:"status"`
	Reason            string    `gorm:"column:reason" json:"reason"`
	AskedBy           string    `gorm:"column:asked_by" json:"asked_by"` // who owed it: AskedBy*
	Attempt           int       `gorm:"column:attempt" json:"attempt"`   // refunds the provider failed for good before this one
	LastError         string    `gorm:"column:last_error" json:"last_error,omitempty"`
	CreatedAt         time.Time `gorm:"column:created_at" json:"created_at"`
	UpdatedAt         time.Time `gorm:"column:updated_at" json:"updated_at"`
}

func (Refund) TableName() string { return "refunds" }

// A refund row's status: the ledger's.
const (
	RefundPending   = ledger.RefundPending // owed, not confirmed by the provider yet
	RefundSucceeded = ledger.RefundSucceeded
	RefundFailed    = ledger.RefundFailed // the provider refused it
)

// Who owed a refund (refunds.asked_by); a support refund's is
// AskedBySupport followed by the admin's id.
const (
	AskedByNotification = "notification" // a provider's success the door could not take
	AskedBySaga         = "saga"         // the order closed without its unit
	AskedBySupport      = "support:"
)

// Support reports whether support asked for r (the order's own payment goes back).
func (r Refund) Support() bool { return strings.HasPrefix(r.AskedBy, AskedBySupport) }

// oweRefund writes p's refund row, pending, unless p has one: in the
// caller's transaction, beside the decision that owes it.
func oweRefund(tx *gorm.DB, p Payment, reason, askedBy string) error {
	if r := []rune(reason); len(r) > 255 {
		reason = string(r[:255])
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	err := tx.Exec("INSERT INTO refunds (order_id, payment_id, provider_payment_id, amount, currency, status, reason, asked_by, created_at, updated_at) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
		p.OrderID, p.ID, p.ProviderPaymentID, p.Amount, p.Currency, RefundPending, reason, askedBy, now, now).Error
	if err != nil {
		return fmt.Errorf("owe refund of payment %s: %w", p.ProviderPaymentID, err)
	}
	return nil
}

// oweDue writes a refund row for each payment of the order whose money the
// ledger says must go back, given its row as the caller's transaction now
// holds it (found false: none).
func oweDue(tx *gorm.DB, orderID string, row Order, found bool, reason, askedBy string) error {
	var ps []Payment
	if err := tx.Where("order_id = ?", orderID).Order("id").Find(&ps).Error; err != nil {
		return fmt.Errorf("read payments of order %s: %w", orderID, err)
	}
	for _, p := range ps {
		if ledger.Took(p.Facts()) && ledger.RefundDue(p.Facts(), row.Facts(), found) {
			if err := oweRefund(tx, p, reason, askedBy); err != nil {
				return err
			}
		}
	}
	return nil
}

// oweAfter writes the refund rows an order's decision owes, reading its row
// in tx.
func oweAfter(tx *gorm.DB, orderID, reason, askedBy string) error {
	row, err := orderRow(tx, orderID)
	found := err == nil
	if err != nil && !errors.Is(err, order.ErrNotFound) {
		return err
	}
	return oweDue(tx, orderID, row, found, reason, askedBy)
}

// OweSupportRefund is support's refund of a PAID order: the refund row of
// the payment that paid it (ledger.PaidWith), written with who asked and
// why, unless it was asked before — then the first ask's row is returned,
// its reason kept. order.ErrNotRefundable: the order is not PAID (or
// REFUNDED) by a provider payment.
func (s *Store) OweSupportRefund(ctx context.Context, orderID, reason, askedBy string) (Refund, Payment, error) {
	var r Refund
	var pay Payment
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		row, err := orderRow(forUpdate(tx), orderID)
		if err != nil {
			return err
		}
		if row.Status != order.StatusPaid && row.Status != order.StatusRefunded {
			return fmt.Errorf("order %s is %s, not PAID: %w", orderID, row.Status, order.ErrNotRefundable)
		}
		var ps []Payment
		if err := tx.Where("order_id = ?", orderID).Order("id").Find(&ps).Error; err != nil {
			return fmt.Errorf("read payments of order %s: %w", orderID, err)
		}
		i := slices.IndexFunc(ps, func(p Payment) bool { return ledger.PaidWith(p.Facts(), row.Facts()) })
		if i < 0 {
			return fmt.Errorf("order %s was paid at the door, with no provider payment to refund: %w", orderID, order.ErrNotRefundable)
		}
		pay = ps[i]
		if row.Status == order.StatusPaid {
			if err := oweRefund(tx, pay, reason, askedBy); err != nil {
				return err
			}
		}
		r, err = take[Refund](tx, order.ErrNotRefundable, "refund of payment "+pay.ProviderPaymentID, "payment_id = ?", pay.ID)
		return err
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return Refund{}, Payment{}, err
	}
	return r, pay, nil
}

// RetryRefund asks again for a refund the provider failed for good: the
// row back to pending under its next attempt (a new idempotency key), its
// provider refund id cleared. A row not failed is returned as it is.
func (s *Store) RetryRefund(ctx context.Context, r Refund) (Refund, error) {
	db := s.db.WithContext(ctx)
	if err := db.Exec("UPDATE refunds SET status = ?, attempt = attempt + 1, provider_refund_id = '' WHERE id = ? AND status = ?",
		RefundPending, r.ID, RefundFailed).Error; err != nil {
		return r, fmt.Errorf("retry refund %d: %w", r.ID, err)
	}
	return take[Refund](db, order.ErrNotFound, fmt.Sprintf("refund %d", r.ID), "id = ?", r.ID)
}

// NoteRefundError records the provider's last refusal of r, for support.
func (s *Store) NoteRefundError(ctx context.Context, r Refund, msg string) error {
	if m := []rune(msg); len(m) > 512 {
		msg = string(m[:512])
	}
	if err := s.db.WithContext(ctx).Exec("UPDATE refunds SET last_error = ? WHERE id = ? AND status <> ?", msg, r.ID, RefundSucceeded).Error; err != nil {
		return fmt.Errorf("note refund %d's error: %w", r.ID, err)
	}
	return nil
}

// OwedRefund is a refund row not confirmed yet, with its payment's provider.
type OwedRefund struct {
	Refund
	Provider string `gorm:"column:provider"`
}

// OwedRefunds are up to limit refund rows the provider has not confirmed,
// untouched for idle (no saga or workflow is working on them), oldest first.
func (s *Store) OwedRefunds(ctx context.Context, idle time.Duration, limit int) ([]OwedRefund, error) {
	var out []OwedRefund
	err := s.db.WithContext(ctx).Raw("SELECT r.*, p.provider FROM refunds r JOIN payments p ON p.id = r.payment_id "+
		"WHERE r.status IN ? AND r.updated_at < NOW(3) - INTERVAL ? MICROSECOND ORDER BY r.updated_at LIMIT ?",
		[]string{RefundPending, RefundFailed}, idle.Microseconds(), limit).Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("read owed refunds: %w", err)
	}
	return out, nil
}

// RefundsOwed sums the refunds not confirmed: how many, how many owed for
// longer than grace (since the decision that owed them), and the oldest's age.
type RefundsOwed struct {
	Owed, Overdue int64
	Oldest        time.Duration
}

// OwedSummary reads RefundsOwed, whatever the age of their sales.
func (s *Store) OwedSummary(ctx context.Context, grace time.Duration) (RefundsOwed, error) {
	var row struct {
		Owed, Overdue int64
		OldestMs      sql.NullInt64
	}
	err := s.db.WithContext(ctx).Raw("SELECT COUNT(*) AS owed, COALESCE(SUM(created_at < NOW(3) - INTERVAL ? MICROSECOND), 0) AS overdue, "+
		"TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(3)) DIV 1000 AS oldest_ms FROM refunds WHERE status IN ?",
		grace.Microseconds(), []string{RefundPending, RefundFailed}).Scan(&row).Error
	if err != nil {
		return RefundsOwed{}, fmt.Errorf("sum owed refunds: %w", err)
	}
	return RefundsOwed{Owed: row.Owed, Overdue: row.Overdue, Oldest: time.Duration(row.OldestMs.Int64) * time.Millisecond}, nil
}

// OpenMoney counts, per provider, the payments still pending and the
// refunds not confirmed: a worker without that provider must not run.
func (s *Store) OpenMoney(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Provider string
		N        int64
	}
	err := s.db.WithContext(ctx).Raw("SELECT provider, COUNT(*) AS n FROM (SELECT provider FROM payments WHERE status = ? "+
		"UNION ALL SELECT p.provider FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE r.status IN ?) m GROUP BY provider",
		PaymentPending, []string{RefundPending, RefundFailed}).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("count open payments and refunds: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Provider] = r.N
	}
	return out, nil
}

// OrderPayments are all payments of an order, oldest first.
func (s *Store) OrderPayments(ctx context.Context, orderID string) ([]Payment, error) {
	var ps []Payment
	if err := s.db.WithContext(ctx).Where("order_id = ?", orderID).Order("id").Find(&ps).Error; err != nil {
		return nil, fmt.Errorf("read payments of order %s: %w", orderID, err)
	}
	return ps, nil
}

// Show adds r to v when r succeeded (refunded_at: its last update).
func (r Refund) Show(v order.View) order.View {
	if r.Status == RefundSucceeded {
		at := r.UpdatedAt.UTC()
		v.RefundID, v.RefundAmount, v.RefundCurrency, v.RefundedAt = r.ProviderRefundID, r.Amount, r.Currency, &at
	}
	return v
}

// BeginRefund records p's refund as pending unless it is recorded already,
// and returns the row: one per payment, whoever asks.
func (s *Store) BeginRefund(ctx context.Context, p Payment, reason string) (Refund, error) {
	db := s.db.WithContext(ctx)
	if err := oweRefund(db, p, reason, AskedBySaga); err != nil {
		return Refund{}, err
	}
	return take[Refund](db, order.ErrNotFound, "refund of payment "+p.ProviderPaymentID, "payment_id = ?", p.ID)
}

// FinishRefund records the provider's answer on r in one transaction; a
// succeeded refund makes its order REFUNDED when it is CANCELLED or FAILED
// (an open order is closed by its saga, which refunds it then), or PAID by
// r's payment (PaidWith: a support refund), whose stock-row unit then goes
// back too; a PAID order keeps its status when the refund was of another
// payment. It returns the order row as it is now (order.ErrNotFound when
// there is none).
func (s *Store) FinishRefund(ctx context.Context, r Refund, providerRefundID, status string) (Order, error) {
	var row Order
	var rowErr error // no order row: the refund is recorded all the same
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("UPDATE refunds SET provider_refund_id = ?, status = ? WHERE id = ? AND status <> ?",
			providerRefundID, status, r.ID, RefundSucceeded).Error; err != nil {
			return fmt.Errorf("record refund %s: %w", providerRefundID, err)
		}
		if status == RefundSucceeded {
			res := tx.Exec("UPDATE seckill_order SET status = ? WHERE order_id = ? AND status IN ?", order.StatusRefunded,
				r.OrderID, []order.Status{order.StatusCancelled, order.StatusFailed})
			if err := eventIf(tx, res, r.OrderID); err != nil {
				return fmt.Errorf("mark order %s refunded: %w", r.OrderID, err)
			}
			if err := refundPaid(tx, r); err != nil {
				return err
			}
		}
		row, rowErr = orderRow(tx, r.OrderID)
		if errors.Is(rowErr, order.ErrNotFound) {
			return nil
		}
		return rowErr
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return Order{}, err
	}
	return row, rowErr
}

// OrderRefunds are the refunds of an order, oldest first.
func (s *Store) OrderRefunds(ctx context.Context, orderID string) ([]Refund, error) {
	var rs []Refund
	if err := s.db.WithContext(ctx).Where("order_id = ?", orderID).Order("id").Find(&rs).Error; err != nil {
		return nil, fmt.Errorf("read refunds of order %s: %w", orderID, err)
	}
	return rs, nil
}

// Money is a sale's money in one currency, in minor units.
type Money struct {
	Currency string `json:"currency"`
	Captured int64  `json:"captured"` // payments that took money (succeeded, mismatch)
	Refunded int64  `json:"refunded"` // refunds the provider confirmed
	// RefundsPending: refunds not confirmed yet (the books: owed; SaleMoney: asked).
	RefundsPending int64 `json:"refunds_pending"`
}

// SaleMoney sums each item's payments and refunds per currency (the control
// room's figures: RefundsPending are refunds asked, not confirmed yet).
func (s *Store) SaleMoney(ctx context.Context, itemIDs []int64) (map[int64][]Money, error) {
	out := make(map[int64][]Money, len(itemIDs))
	if len(itemIDs) == 0 {
		return out, nil
	}
	var rows []struct {
		ItemID int64
		Money
	}
	err := s.db.WithContext(ctx).Raw("SELECT item_id, currency, SUM(amount) AS captured, 0 AS refunded, 0 AS refunds_pending "+
		"FROM payments WHERE item_id IN ? AND status IN ? GROUP BY item_id, currency UNION ALL "+
		"SELECT p.item_id, r.currency, 0, SUM(IF(r.status = ?, r.amount, 0)), SUM(IF(r.status = ?, 0, r.amount)) "+
		"FROM refunds r JOIN payments p ON p.id = r.payment_id WHERE p.item_id IN ? GROUP BY p.item_id, r.currency",
		itemIDs, []string{PaymentSucceeded, PaymentMismatch}, RefundSucceeded, RefundSucceeded, itemIDs).Scan(&rows).Error
	if err != nil {
		return nil, fmt.Errorf("sum payments of %d items: %w", len(itemIDs), err)
	}
	for _, r := range rows {
		out[r.ItemID] = AddMoney(out[r.ItemID], r.Money)
	}
	return out, nil
}

// AddMoney adds m to the entry of its currency in ms.
func AddMoney(ms []Money, m Money) []Money {
	for i := range ms {
		if ms[i].Currency == m.Currency {
			ms[i].Captured += m.Captured
			ms[i].Refunded += m.Refunded
			ms[i].RefundsPending += m.RefundsPending
			return ms
		}
	}
	return append(ms, m)
}

// refundPaid makes r's order REFUNDED if r's payment paid it, and gives its
// deducted unit back to the stock row (once: restoreDeduction).
func refundPaid(tx *gorm.DB, r Refund) error {
	res := tx.Exec(`UPDATE seckill_order o JOIN payments p ON p.id = ? AND p.order_id = o.order_id AND p.user_id = o.user_id
		SET o.status = ?, o.reason = ? WHERE o.order_id = ? AND o.status = ? AND p.status = ? AND o.paid_at = p.succeeded_at`,
		r.PaymentID, order.StatusRefunded, order.ReasonSupportRefund, r.OrderID, order.StatusPaid, PaymentSucceeded)
	if res.Error != nil {
		return fmt.Errorf("mark paid order %s refunded: %w", r.OrderID, res.Error)
	}
	if res.RowsAffected == 0 {
		return nil
	}
	if err := recordEvent(tx, r.OrderID); err != nil {
		return err
	}
	_, err := restoreDeduction(tx, r.OrderID)
	return err
}
