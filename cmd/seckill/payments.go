package main

import (
	"context"
	"net/http"
	"strings"
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

// newPayments builds the provider SECKILL_PAYMENT_PROVIDER names, behind
// provider.Guard, and the cashier over it; door: none (payments at the
// door only). With testpay the API serves the test provider's checkout page
// on a side listener of its own (SECKILL_PAYMENT_TESTPAY_ADDR). The buyer's
// pay and cancel: the desk's, but under Stripe only a verified notification
// pays. A success the door cannot take is refunded by a PaymentRefund
// workflow the cashier starts.
func newPayments(d *deps, p apiStores, desk *payment.Desk, refunds cashier.Refunds) (payhook.Options, api.OrderActions, error) {
	cfg := d.cfg.Payment
	name := strings.ToLower(cfg.Provider)
	prov, err := newProvider(d, name, true)
	if err != nil || prov == nil {
		return payhook.Options{NotifyRPS: cfg.NotifyRPS}, desk, err
	}
	// Decisions group-committed: 4 lanes (of the 32 MySQL connections) of up
	// to 128 events each (docs/payments.md, "Group commit").
	events := store.NewBatcher(p.db, 4, 128)
	d.onStop(events.Close)
	c := cashier.New(events, p.views, prov, desk,
		cashier.Options{Provider: name, ReturnURL: cfg.ReturnURL, Refunds: refunds}, cashier.NewMetrics(p.metrics.Registry()), d.log)
	var actions api.OrderActions = desk
	if name == "stripe" {
		actions = checkoutOnly{desk}
	}
	return payhook.Options{Cashier: c, NotifyRPS: cfg.NotifyRPS}, actions, nil
}

// newProvider is the provider name names, behind provider.Guard; nil for
// door. The test provider keeps its payments in the API's memory and serves
// its checkout there (api true); a worker cannot reach them, so under
// testpay the worker's saga runs without a provider (logged).
func newProvider(d *deps, name string, api bool) (provider.Provider, error) {
	cfg := d.cfg.Payment
	var prov provider.Provider
	switch {
	case name == "stripe":
		prov = stripepay.New(stripepay.Config{Key: cfg.Stripe.Key.Value(), WebhookSecret: cfg.Stripe.WebhookSecret.Value(), URL: cfg.Stripe.URL})
	case name == "testpay" && api:
		tp := testpay.New(testpay.Options{Secret: cfg.Testpay.Secret.Value(), NotifyURL: cfg.Testpay.NotifyURL,
			BaseURL: cfg.Testpay.URL, Logger: d.log.With("component", "testpay")})
		d.onStop(tp.Close)
		serve, err := d.listen("testpay checkout", &http.Server{Addr: cfg.Testpay.Addr, Handler: tp.Handler(),
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}, time.Second)
		if err != nil {
			return nil, err
		}
		serve()
		d.log.Info("test payment provider: checkout pages served", "addr", cfg.Testpay.Addr, "url", cfg.Testpay.URL,
			"notify_url", cfg.Testpay.NotifyURL)
		prov = tp
	case name == "testpay":
		d.log.Warn("the test payment provider lives in the API process: the saga cancels and refunds no provider payment")
		return nil, nil
	default:
		return nil, nil
	}
	return provider.Guard(prov, provider.Limits{}), nil
}

// viaProvider reports whether payments go through a provider: the sagas
// started then cancel and refund provider payments (workflows.Input.Payments).
func viaProvider(cfg config.Config) bool {
	name := strings.ToLower(cfg.Payment.Provider)
	return name != "" && name != "door"
}

// checkoutOnly is the desk without the buyer's pay: a real provider's
// verified notification is the only word that pays.
type checkoutOnly struct{ *payment.Desk }

var errPayAtCheckout = apierr.ErrOrderNotPayable.With("payments go through the provider: POST /api/v1/orders/{orderId}/checkout")

func (checkoutOnly) Pay(context.Context, string, int64, time.Time) (order.View, error) {
	return order.View{}, errPayAtCheckout
}
