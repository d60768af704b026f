// Package cashier takes payments through a provider (issue 29, step 2): a
// buyer's checkout opens the provider payment of their payable order, and
// the door judges the provider's word — a verified notification, dropped
// when its event id was taken before, matched to its payment and order,
// checked for amount and currency, and decided in one MySQL transaction as
// a pay at the door is (store.ApplyPaymentEvent); the paid order is then
// published and its saga woken as after a door pay (payment.Desk.Settle).
package cashier

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/store"
)

// Store is what the cashier reads and writes in MySQL (store.Store).
type Store interface {
	FindOrder(ctx context.Context, orderID string) (store.Order, error)
	GetItem(ctx context.Context, id int64) (store.Item, error)
	OrderPayment(ctx context.Context, orderID, provider string) (store.Payment, error)
	OpenPayment(ctx context.Context, p store.Payment) (store.Payment, error)
	NamePayment(ctx context.Context, p store.Payment, providerID, checkoutURL string) (store.Payment, error)
	ApplyPaymentEvent(ctx context.Context, e store.PaymentEvent) (store.EventResult, error)
}

// Views reads an order's latest view in Redis (orderstatus.Board): an
// order the saga has not persisted yet is known by its QUEUED view.
type Views interface {
	Status(ctx context.Context, orderID string) (order.View, bool, error)
}

// Settler follows an order a notification paid (payment.Desk).
type Settler interface {
	Settle(ctx context.Context, row store.Order) order.View
}

var (
	_ Store   = (*store.Store)(nil)
	_ Settler = (*payment.Desk)(nil)
)

// Refunds starts the refund workflow of a payment the door could not take
// (workflows.Client.StartRefund): one per payment, however often asked.
type Refunds interface {
	StartRefund(ctx context.Context, orderID, paymentID, reason string) error
}

// Options configure a cashier.
type Options struct {
	// Refunds refunds a success the door could not take; nil: none is
	// refunded (logged and counted).
	Refunds Refunds
	// Provider names the provider in the payments table (testpay, stripe).
	Provider string
	// ReturnURL is where the provider's checkout sends the buyer once paid;
	// {order_id} in it is the order's id.
	ReturnURL string
}

// Cashier opens payments and judges notifications. Safe for concurrent use.
type Cashier struct {
	store   Store
	views   Views
	p       provider.Provider
	settler Settler
	opts    Options
	m       *Metrics
	log     *slog.Logger
}

// New returns a cashier asking p (wrap it in provider.Guard).
func New(st Store, views Views, p provider.Provider, settler Settler, opts Options, m *Metrics, log *slog.Logger) *Cashier {
	return &Cashier{store: st, views: views, p: p, settler: settler, opts: opts, m: m, log: log.With("component", "cashier")}
}

// Checkout is an order's provider payment as the buyer sees it.
type Checkout struct {
	OrderID     string    `json:"order_id"`
	PaymentID   string    `json:"payment_id"`
	Status      string    `json:"status"`
	Amount      int64     `json:"amount"` // minor units
	Currency    string    `json:"currency"`
	PayBy       time.Time `json:"pay_by"`
	CheckoutURL string    `json:"checkout_url"` // the provider's page: Stripe Checkout's, the test provider's
}

func checkoutOf(p store.Payment) Checkout {
	return Checkout{OrderID: p.OrderID, PaymentID: p.ProviderPaymentID, Status: p.Status, Amount: p.Amount,
		Currency: p.Currency, PayBy: p.PayBy, CheckoutURL: p.CheckoutURL}
}

// Checkout opens the provider payment of the buyer's payable order (QUEUED
// or PENDING_PAYMENT, unpaid, before pay_by at now), or returns the one
// opened before: amount and currency the item's, its name what the buyer
// pays for, the order id the idempotency key. Under Stripe the payment is
// a Checkout Session, its url the page the buyer pays on (checkout_url),
// its id what the payments row holds. order.ErrNotFound when the buyer has
// no such order, order.ErrNotPayable when it is not payable.
func (c *Cashier) Checkout(ctx context.Context, orderID string, userID int64, now time.Time) (Checkout, error) {
	p, err := c.store.OrderPayment(ctx, orderID, c.opts.Provider)
	switch {
	case err == nil && p.UserID != userID:
		return Checkout{}, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
	case err == nil && p.Named():
		c.m.checkouts.WithLabelValues("existing").Inc()
		return checkoutOf(p), nil
	case err == nil: // opened, the provider's answer not recorded: the same create again
		return c.create(ctx, p)
	case !errors.Is(err, order.ErrNotFound):
		return Checkout{}, c.checkoutFailed(err)
	}
	v, err := c.view(ctx, orderID)
	switch {
	case err != nil:
		return Checkout{}, c.checkoutFailed(err)
	case v.UserID != userID:
		return Checkout{}, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
	case v.Status != order.StatusQueued && v.Status != order.StatusPendingPayment, v.PayBy == nil, !now.Before(*v.PayBy):
		return Checkout{}, fmt.Errorf("order %s is %s (pay by %v): %w", orderID, v.Status, v.PayBy, order.ErrNotPayable)
	}
	it, err := c.store.GetItem(ctx, v.ItemID)
	if err != nil {
		return Checkout{}, c.checkoutFailed(err)
	}
	if it.PriceCents <= 0 {
		return Checkout{}, fmt.Errorf("order %s: item %d is free, nothing to pay through a provider: %w", orderID, it.ID, order.ErrNotPayable)
	}
	// Durable before the provider: the row, with every parameter the
	// provider is sent, commits first; the create follows under its key.
	expires := provider.SessionExpiry(*v.PayBy, now)
	p, err = c.store.OpenPayment(ctx, store.Payment{OrderID: orderID, UserID: userID, ItemID: it.ID, Provider: c.opts.Provider,
		IdempotencyKey: orderID, Amount: it.PriceCents, Currency: it.Currency, Name: it.Name,
		ReturnURL: strings.ReplaceAll(c.opts.ReturnURL, "{order_id}", orderID), PayBy: *v.PayBy, ExpiresAt: &expires})
	switch {
	case err != nil:
		return Checkout{}, c.checkoutFailed(err)
	case p.UserID != userID:
		return Checkout{}, fmt.Errorf("order %s: %w", orderID, order.ErrNotFound)
	case p.Named(): // a concurrent checkout of the order named it
		c.m.checkouts.WithLabelValues("existing").Inc()
		return checkoutOf(p), nil
	}
	return c.create(ctx, p)
}

// create asks the provider for p's payment (its stored request, under its
// idempotency key: a replay meets the first create) and records its id.
func (c *Cashier) create(ctx context.Context, p store.Payment) (Checkout, error) {
	pay, err := c.p.Create(ctx, p.Request())
	if err != nil {
		return Checkout{}, c.checkoutFailed(fmt.Errorf("checkout of order %s: %w", p.OrderID, err))
	}
	if p, err = c.store.NamePayment(ctx, p, pay.ID, pay.CheckoutURL); err != nil {
		return Checkout{}, c.checkoutFailed(err)
	}
	c.m.checkouts.WithLabelValues("created").Inc()
	return checkoutOf(p), nil
}

func (c *Cashier) checkoutFailed(err error) error {
	c.m.checkouts.WithLabelValues("failed").Inc()
	return err
}

// view is the order as the door sees it: its row, else its view in Redis.
func (c *Cashier) view(ctx context.Context, orderID string) (order.View, error) {
	row, err := c.store.FindOrder(ctx, orderID)
	if err == nil {
		return row.View(), nil
	}
	if !errors.Is(err, order.ErrNotFound) {
		return order.View{}, err
	}
	v, ok, verr := c.views.Status(ctx, orderID)
	switch {
	case verr != nil:
		return order.View{}, fmt.Errorf("order %s: %w", orderID, verr)
	case !ok:
		return order.View{}, err
	}
	return v, nil
}
