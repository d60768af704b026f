// Command seckill-stripe is the Stripe stand-in for development and tests
// (payment/provider/standin): the part of Stripe's API the shop uses, its
// hosted checkout page, and its webhooks signed as Stripe signs them, with
// state in memory. Point the shop at it with SECKILL_PAYMENT_PROVIDER=stripe,
// SECKILL_PAYMENT_STRIPE_URL=<its URL> (only with SECKILL_DEV=1), any
// SECKILL_PAYMENT_STRIPE_KEY=sk_test_… and the same webhook secret on both
// sides: the shop then runs its production Stripe code (stripe-go) against
// it. A binary of its own, outside the shipping image: the seckill binary
// does not link it (test/arch).
//
//	seckill-stripe [-addr 127.0.0.1:8092] [-url http://127.0.0.1:8092]
//	  [-webhook-url http://127.0.0.1:8080/api/v1/payments/notifications]
//	  [-webhook-secret whsec_…] [-keys sk_test_a,sk_test_b] [-rps 100] [-events type,type]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/payment/provider/standin"
)

// options are the flags.
type options struct {
	Addr, URL                 string
	WebhookURL, WebhookSecret string
	Keys, Events              string
	RPS                       float64
	Resends                   int
	ResendAfter               time.Duration
	Seed                      uint64
}

func main() {
	var o options
	flag.StringVar(&o.Addr, "addr", "127.0.0.1:8092", "listen address")
	flag.StringVar(&o.URL, "url", "", "the URL buyers' browsers reach it at: checkout pages are URL/pay/<session id> (default http://<addr>)")
	flag.StringVar(&o.WebhookURL, "webhook-url", "http://127.0.0.1:8080/api/v1/payments/notifications",
		"where events are POSTed (the shop's notification endpoint); empty: none are sent")
	flag.StringVar(&o.WebhookSecret, "webhook-secret", config.DevTestpaySecret,
		"the endpoint's signing secret (whsec_…): the shop's SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET; the default is published, development only")
	flag.StringVar(&o.Keys, "keys", "", "comma-separated API keys taken (default: any sk_test_… key, as stripe-mock)")
	flag.Float64Var(&o.RPS, "rps", 100, "API calls answered per second, reads and writes each, before 429 rate_limit "+
		"(Stripe: about 100 in live mode, 25 in test mode); 0: no limit")
	flag.StringVar(&o.Events, "events", strings.Join(standin.DefaultEventTypes, ","), "comma-separated event types sent (the endpoint's enabled events)")
	flag.IntVar(&o.Resends, "resends", 10, "further sends of an event not answered 2xx")
	flag.DurationVar(&o.ResendAfter, "resend-after", time.Second, "the first wait before a resend, doubled each time up to a minute")
	flag.Uint64Var(&o.Seed, "seed", 1, "the knobs' draws")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, log); err != nil {
		log.Error("seckill-stripe", "err", err)
		os.Exit(1)
	}
}

// run serves the stand-in on o.Addr until ctx ends, then drains it.
func run(ctx context.Context, o options, log *slog.Logger) error {
	if o.URL == "" {
		o.URL = "http://" + o.Addr
	}
	if !strings.HasPrefix(o.WebhookSecret, "whsec_") {
		return fmt.Errorf("-webhook-secret %q: a Stripe signing secret starts with whsec_", o.WebhookSecret)
	}
	var keys, events []string
	for k := range strings.SplitSeq(o.Keys, ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, k)
		}
	}
	for e := range strings.SplitSeq(o.Events, ",") {
		if e = strings.TrimSpace(e); e != "" {
			events = append(events, e)
		}
	}
	s := standin.New(standin.Options{BaseURL: o.URL, WebhookURL: o.WebhookURL, WebhookSecret: o.WebhookSecret, EventTypes: events,
		Keys: keys, RPS: o.RPS, Resends: o.Resends, ResendAfter: o.ResendAfter, Seed: o.Seed, Logger: log})
	defer s.Close() // after the server has drained
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	failed := make(chan error, 1)
	go func() { failed <- srv.Serve(ln) }()
	log.Info("Stripe stand-in serving", "addr", ln.Addr().String(), "url", o.URL, "webhook_url", o.WebhookURL,
		"rps", o.RPS, "keys", len(keys), "events", events)
	select {
	case err := <-failed:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Info("Stripe stand-in stopped")
	return nil
}
