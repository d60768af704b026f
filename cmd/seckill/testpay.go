package main

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/payment/provider/testpay"
)

func newTestpayCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "testpay",
		Short: "Serve the built-in test payment provider: checkout pages, its JSON API, signed notifications to the API",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runTestpay(cmd.Context(), a)
		},
	}
}

// runTestpay serves the test provider on SECKILL_PAYMENT_TESTPAY_ADDR until
// ctx ends: the pages buyers pay on, the API every role reaches it through
// (testpay.Client), /healthz. Its payments live in this process's memory.
// Its knobs start at zero; PUT /v1/knobs turns them. Only on a development
// machine (SECKILL_DEV), as SECKILL_PAYMENT_PROVIDER=testpay: its payments
// move no money, and its secret defaults to a published one.
func runTestpay(ctx context.Context, a *app) (err error) {
	cfg, log := a.cfg.Payment.Testpay, a.log
	if !a.cfg.Dev {
		return errors.New("seckill testpay is the test payment provider, for development only: no money moves through it " +
			"and its secret may be the published one; set SECKILL_DEV=1 on a development machine")
	}
	log.Info("starting testpay", "config", a.cfg.String())
	d := &deps{cfg: a.cfg, log: log}
	defer func() { err = errors.Join(d.stoppedWhileStarting(ctx, err), d.close()) }()
	tp := testpay.New(testpay.Options{Secret: cfg.Secret.Value(), NotifyURL: cfg.NotifyURL, BaseURL: cfg.URL, Logger: log})
	d.onStop(tp.Close) // after the server has drained
	mux := http.NewServeMux()
	mux.Handle("/", tp.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	serve, err := d.listen("testpay", &http.Server{Addr: cfg.Addr, Handler: mux,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}, 5*time.Second)
	if err != nil {
		return err
	}
	failed := serve()
	log.Info("test payment provider", "url", cfg.URL, "notify_url", cfg.NotifyURL)
	select {
	case <-ctx.Done():
		return nil
	case err := <-failed:
		return err
	}
}
