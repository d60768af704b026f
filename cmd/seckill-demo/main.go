// Command seckill-demo runs the demo sale `make run` ends with, against a
// running API: it creates an item, buys one unit each as a few buyers, pays
// one order at its 202 — on the provider's checkout page when the API has a
// checkout (under make run, Stripe Checkout's page as the Stripe stand-in,
// seckill-stripe, serves it), else at the door — and follows the orders until their
// sagas have them, telling what it did in words (on stderr). On stdout it
// prints the demo's item and the order left to pay as shell assignments
// (ITEM_ID=…, ORDER_ID=…, and CHECKOUT_URL=… with a checkout) for scripts/run. Its calls go through the API's generated
// client (apiclient), with tokens signed with SECKILL_JWT_SECRET, as
// `seckill token` signs them. A binary of its own: the seckill binary
// does not link it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seckill/seckill/config"
)

func main() {
	var o options
	flag.StringVar(&o.API, "api", "http://127.0.0.1:8080", "the API the item is created on and the orders are followed on")
	flag.StringVar(&o.BuyAPI, "buy-api", "", "the API the buyers buy and pay on (default: --api)")
	flag.DurationVar(&o.Within, "within", time.Minute, "how long the orders' sagas may take")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "seckill-demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, stdout, words io.Writer) error {
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	o.Secret = []byte(cfg.JWTSecret.Value())
	d, err := sale(ctx, o, words)
	if err != nil {
		return err
	}
	if _, err = fmt.Fprintf(stdout, "ITEM_ID=%d\nORDER_ID=%s\n", d.ItemID, d.ToPay); err == nil && d.CheckoutURL != "" {
		_, err = fmt.Fprintf(stdout, "CHECKOUT_URL=%s\n", d.CheckoutURL)
	}
	return err
}
