package main

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/payment"
	"github.com/seckill/seckill/payment/cashier"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/payment/provider/stripepay"
	"github.com/seckill/seckill/payment/provider/testpay"
)

// newPayments builds the provider SECKILL_PAYMENT_PROVIDER names, behind
// provider.Guard, and the cashier over it; door: none (payments at the
// door only). With testpay the API serves the test provider's checkout page
// on a side listener of its own (SECKILL_PAYMENT_TESTPAY_ADDR). The buyer's
// pay and cancel: the desk's, but under Stripe only a verified notification
// pays.
func newPayments(d *deps, p apiStores, desk *payment.Desk) (payhook.Options, api.OrderActions, error) {
	cfg := d.cfg.Payment
	name := strings.ToLower(cfg.Provider)
	var prov provider.Provider
	switch name {
	case "stripe":
		prov = stripepay.New(stripepay.Config{Key: cfg.Stripe.Key.Value(), WebhookSecret: cfg.Stripe.WebhookSecret.Value(), URL: cfg.Stripe.URL})
	case "testpay":
		tp := testpay.New(testpay.Options{Secret: cfg.Testpay.Secret.Value(), NotifyURL: cfg.Testpay.NotifyURL,
			BaseURL: cfg.Testpay.URL, Logger: d.log.With("component", "testpay")})
		d.onStop(tp.Close)
		serve, err := d.listen("testpay checkout", &http.Server{Addr: cfg.Testpay.Addr, Handler: tp.Handler(),
			ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}, time.Second)
		if err != nil {
			return payhook.Options{}, nil, err
		}
		serve()
		d.log.Info("test payment provider: checkout pages served", "addr", cfg.Testpay.Addr, "url", cfg.Testpay.URL,
			"notify_url", cfg.Testpay.NotifyURL)
		prov = tp
	default:
		return payhook.Options{NotifyRPS: cfg.NotifyRPS}, desk, nil
	}
	c := cashier.New(p.db, p.views, provider.Guard(prov, provider.Limits{}), desk,
		cashier.Options{Provider: name, ReturnURL: cfg.ReturnURL}, cashier.NewMetrics(p.metrics.Registry()), d.log)
	var actions api.OrderActions = desk
	if name == "stripe" {
		actions = checkoutOnly{desk}
	}
	return payhook.Options{Cashier: c, NotifyRPS: cfg.NotifyRPS}, actions, nil
}

// checkoutOnly is the desk without the buyer's pay: a real provider's
// verified notification is the only word that pays.
type checkoutOnly struct{ *payment.Desk }

var errPayAtCheckout = apierr.ErrOrderNotPayable.With("payments go through the provider: POST /api/v1/orders/{orderId}/checkout")

func (checkoutOnly) Pay(context.Context, string, int64, time.Time) (order.View, error) {
	return order.View{}, errPayAtCheckout
}
