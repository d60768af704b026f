package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment/provider"
)

// placeholderPrefix marks a payments row the provider has not named yet:
// committed before the provider was asked (Placeholder).
const placeholderPrefix = "key:"

// Placeholder is the provider_payment_id of a payment keyed key that the
// provider has not named yet.
func Placeholder(key string) string { return placeholderPrefix + key }

// Named reports whether the provider has named p (its id is the provider's).
func (p Payment) Named() bool { return !strings.HasPrefix(p.ProviderPaymentID, placeholderPrefix) }

// OpenPayment commits p, pending and not named yet (its provider payment id
// Placeholder(p.IdempotencyKey)), with every parameter the provider will be
// sent, before the provider is asked; the order's row for the provider if
// one is there already (a second checkout: its stored parameters are the
// ones to send again).
func (s *Store) OpenPayment(ctx context.Context, p Payment) (Payment, error) {
	if p.IdempotencyKey == "" {
		return Payment{}, fmt.Errorf("open payment of order %s: no idempotency key", p.OrderID)
	}
	if existing, err := s.OrderPayment(ctx, p.OrderID, p.Provider); err == nil {
		return existing, nil
	}
	p.ProviderPaymentID = Placeholder(p.IdempotencyKey)
	return s.SavePayment(ctx, p)
}

// NamePayment records the provider's id (and checkout page) of a payment
// opened before it was asked; a row named already is returned as it is.
func (s *Store) NamePayment(ctx context.Context, p Payment, providerID, checkoutURL string) (Payment, error) {
	db := s.db.WithContext(ctx)
	if err := db.Exec("UPDATE payments SET provider_payment_id = ?, checkout_url = ? WHERE id = ? AND provider_payment_id LIKE ?",
		providerID, checkoutURL, p.ID, placeholderPrefix+"%").Error; err != nil {
		return Payment{}, fmt.Errorf("name payment of order %s %s: %w", p.OrderID, providerID, err)
	}
	return take[Payment](db, order.ErrNotFound, fmt.Sprintf("payment %d", p.ID), "id = ?", p.ID)
}

// unnamed is the order's payment of provider not named yet, locked in tx:
// an event the provider sent for it before we could record its id finds
// it by the order its metadata names, and names it.
func unnamed(tx *gorm.DB, provider, orderID, paymentID string) (Payment, error) {
	p, err := take[Payment](forUpdate(tx), order.ErrNotFound, "payment of order "+orderID,
		"provider = ? AND order_id = ? AND provider_payment_id LIKE ?", provider, orderID, placeholderPrefix+"%")
	if err != nil {
		return p, err
	}
	if err := tx.Exec("UPDATE payments SET provider_payment_id = ? WHERE id = ?", paymentID, p.ID).Error; err != nil {
		return p, fmt.Errorf("name payment of order %s %s: %w", orderID, paymentID, err)
	}
	p.ProviderPaymentID = paymentID
	return p, nil
}

// ExpiresAtOf is p's stored expiry as a time (zero: none stored).
func (p Payment) ExpiresAtOf() time.Time {
	if p.ExpiresAt == nil {
		return time.Time{}
	}
	return *p.ExpiresAt
}

// Request is the create the provider is (or was) sent for p: its stored
// parameters and idempotency key, so that a replay sends the same.
func (p Payment) Request() provider.Request {
	return provider.Request{OrderID: p.OrderID, Amount: p.Amount, Currency: p.Currency, Name: p.Name, PayBy: p.PayBy,
		ReturnURL: p.ReturnURL, IdempotencyKey: p.IdempotencyKey, ExpiresAt: p.ExpiresAtOf()}
}
