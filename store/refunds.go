package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
