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

// Refund is a refund of a payment through its provider (table refunds, one
// per payment), made by the saga's RefundPayment step.
type Refund struct {
	ID                int64     `gorm:"column:id;primaryKey"`
	OrderID           string    `gorm:"column:order_id"`
	PaymentID         int64     `gorm:"column:payment_id"` // payments.id
	ProviderPaymentID string    `gorm:"column:provider_payment_id"`
	ProviderRefundID  string    `gorm:"column:provider_refund_id"`
	Amount            int64     `gorm:"column:amount"`
	Currency          string    `gorm:"column:currency"`
	Status            string    `gorm:"column:status"`
	Reason            string    `gorm:"column:reason"`
	CreatedAt         time.Time `gorm:"column:created_at"`
	UpdatedAt         time.Time `gorm:"column:updated_at"`
}

func (Refund) TableName() string { return "refunds" }

// A refund row's status.
const (
	RefundPending   = "pending" // asked, not confirmed by the provider yet
	RefundSucceeded = "succeeded"
	RefundFailed    = "failed" // the provider refused it
)

// OrderPayments are all payments of an order, oldest first.
func (s *Store) OrderPayments(ctx context.Context, orderID string) ([]Payment, error) {
	var ps []Payment
	if err := s.db.WithContext(ctx).Where("order_id = ?", orderID).Order("id").Find(&ps).Error; err != nil {
		return nil, fmt.Errorf("read payments of order %s: %w", orderID, err)
	}
	return ps, nil
}

// RefundDue reports whether p's money must go back, given its order's row
// (found false: none): a mismatch always; a success when the order closed
// without its unit, belongs to another buyer, was paid by another payment
// (its paid_at is not p's success), or is open but p succeeded at or after
// pay_by (it can never pay it). A PAID row without paid_at keeps p: it may
// be what paid it.
func RefundDue(p Payment, row Order, found bool) bool {
	switch {
	case p.Status == PaymentMismatch:
		return true
	case p.Status != PaymentSucceeded || p.SucceededAt == nil:
		return false
	case !found:
		return !p.SucceededAt.Before(p.PayBy)
	case row.UserID != p.UserID:
		return true
	case row.Status == order.StatusCancelled, row.Status == order.StatusFailed, row.Status == order.StatusRefunded:
		return true
	case row.Status == order.StatusPaid || row.PaidAt != nil:
		return row.PaidAt != nil && !row.PaidAt.Equal(*p.SucceededAt)
	}
	return !p.SucceededAt.Before(p.PayBy)
}

// BeginRefund records p's refund as pending unless it is recorded already,
// and returns the row: one per payment, whoever asks.
func (s *Store) BeginRefund(ctx context.Context, p Payment, reason string) (Refund, error) {
	if r := []rune(reason); len(r) > 255 {
		reason = string(r[:255])
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	db := s.db.WithContext(ctx)
	err := db.Exec("INSERT INTO refunds (order_id, payment_id, provider_payment_id, amount, currency, status, reason, created_at, updated_at) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id",
		p.OrderID, p.ID, p.ProviderPaymentID, p.Amount, p.Currency, RefundPending, reason, now, now).Error
	if err != nil {
		return Refund{}, fmt.Errorf("record refund of payment %s: %w", p.ProviderPaymentID, err)
	}
	return take[Refund](db, order.ErrNotFound, "refund of payment "+p.ProviderPaymentID, "payment_id = ?", p.ID)
}

// FinishRefund records the provider's answer on r in one transaction; a
// succeeded refund makes its order REFUNDED when it is CANCELLED or FAILED
// (an open order is closed by its saga, which refunds it then; a PAID one
// keeps its status: the refund was of another payment). It returns the
// order row as it is now (order.ErrNotFound when there is none).
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
