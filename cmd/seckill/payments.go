package main

import (
	"context"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/store"
)

// newPayments builds the cashier over prov, the provider
// SECKILL_PAYMENT_PROVIDER names behind provider.Guard (newProvider); door,
// prov nil: none (payments at the door only). The buyer's pay and cancel: the desk's, but under Stripe only
// a verified notification pays, and under testpay the pay is the test card
// at the provider, judged at the door. A success the door cannot take is
// refunded by a PaymentRefund workflow the cashier starts.
func newPayments(d *deps, p apiStores, desk *payment.Desk, prov provider.Provider, refunds cashier.Refunds) (payhook.Options, api.OrderActions) {
	cfg := d.cfg.Payment
	name := cfg.Provider // lower case (config normalizes it)
	if prov == nil {
		return payhook.Options{NotifyRPS: cfg.NotifyRPS}, desk
	}
	// Decisions group-committed: 4 lanes (of the 32 MySQL connections) of up
	// to 128 events each (docs/payments.md, "Group commit").
	events := store.NewBatcher(p.db, 4, 128)
	d.onStop(events.Close)
	c := cashier.New(events, p.views, prov, desk,
		cashier.Options{Provider: name, ReturnURL: cfg.ReturnURL, Refunds: refunds}, cashier.NewMetrics(p.metrics.Registry()), d.log)
	var actions api.OrderActions = desk
	switch name {
	case "stripe":
		actions = checkoutOnly{desk}
	case "testpay":
		actions = testCard{desk, c, testpayClient(cfg)}
	}
	return payhook.Options{Cashier: c, NotifyRPS: cfg.NotifyRPS}, actions
}

// newProvider is the provider name names, behind provider.Guard; nil for
// door. Under testpay it is a client of the `seckill testpay` role at
// SECKILL_PAYMENT_TESTPAY_URL: the API and the worker reach the same one.
func newProvider(d *deps, name string) provider.Provider {
	cfg := d.cfg.Payment
	var prov provider.Provider
	switch name {
	case "stripe":
		prov = stripepay.New(stripepay.Config{Key: cfg.Stripe.Key.Value(), WebhookSecret: cfg.Stripe.WebhookSecret.Value(),
			WebhookSecretPrevious: cfg.Stripe.WebhookSecretPrevious.Value(), URL: cfg.Stripe.URL})
	case "testpay":
		prov = testpayClient(cfg)
	default:
		return nil
	}
	return provider.Guard(prov, provider.Limits{RPS: cfg.GuardRPS()})
}

func testpayClient(cfg config.Payment) *testpay.Client {
	return testpay.NewClient(cfg.Testpay.URL, cfg.Testpay.Secret.Value(), nil)
}

// viaProvider reports whether payments go through a provider: the sagas
// started then cancel and refund provider payments (workflows.Input.Payments).
func viaProvider(cfg config.Config) bool {
	return cfg.Payment.Provider != "" && cfg.Payment.Provider != "door"
}

// checkoutOnly is the desk without the buyer's pay: a real provider's
// verified notification is the only word that pays.
type checkoutOnly struct{ *payment.Desk }

var errPayAtCheckout = apierr.ErrOrderNotPayable.With("payments go through the provider: POST /api/v1/orders/{orderId}/checkout")

func (checkoutOnly) Pay(context.Context, string, int64, time.Time) (order.View, error) {
	return order.View{}, errPayAtCheckout
}

// testCard is the desk whose buyer's pay is the test provider's instant
// card, answered after the door's decision (cashier.PayByCard).
type testCard struct {
	*payment.Desk
	c    *cashier.Cashier
	card cashier.Card
}

func (t testCard) Pay(ctx context.Context, orderID string, userID int64, receivedAt time.Time) (order.View, error) {
	return t.c.PayByCard(ctx, t.card, t.Desk, orderID, userID, receivedAt)
}
