package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/books"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/outbox"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/reconcile"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/workflows"
)

func newReconcileCmd(a *app) *cobra.Command {
	var (
		items  []int64
		repair bool
		asJSON bool
		grace  time.Duration
		since  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "reconcile",
		Short: "Compare Redis, MySQL and Temporal for each item and repair what has one safe answer",
		Long:  "Each kind of drift and what --repair does to it: docs/runbook.md. Exits non-zero while drift remains.",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			grace = orSetting(cmd, "grace", grace, a.cfg.Reconcile.Grace)
			since = orSetting(cmd, "since", since, a.cfg.Reconcile.Since)
			d := &deps{cfg: a.cfg, log: a.log}
			defer func() { _ = d.close() }()
			st, err := d.mysql(ctx)
			if err != nil {
				return err
			}
			rdb, err := d.redis(ctx, redisx.Options{PoolSize: 16, Name: "seckill-reconcile"}, true)
			if err != nil {
				return err
			}
			tc, err := d.temporal(ctx)
			if err != nil {
				return err
			}
			r := newReconciler(a.cfg, st, rdb, tc, newProvider(&deps{cfg: a.cfg, log: a.log}, a.cfg.Payment.Provider), grace, a.log)
			if len(items) == 0 {
				if items, err = r.ActiveItems(ctx, time.Now(), since); err != nil {
					return err
				}
			}
			rep, err := r.Run(ctx, items, repair)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(rep); err != nil {
					return err
				}
			} else {
				printReconcile(out, rep)
			}
			if n := rep.Remaining(); n > 0 {
				return fmt.Errorf("%d drift finding(s) remain", n)
			}
			return nil
		},
	}
	cmd.Flags().Int64SliceVar(&items, "item", nil, "item id(s) to check (default: items live or ended within --since)")
	cmd.Flags().BoolVar(&repair, "repair", false, "repair what has one safe answer")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().DurationVar(&grace, "grace", 0, "how old a reservation or QUEUED order must be before its missing pieces count (default SECKILL_RECONCILE_GRACE)")
	cmd.Flags().DurationVar(&since, "since", 0, "without --item: items whose sale ended at most this long ago (default SECKILL_RECONCILE_SINCE)")
	return cmd
}

// newReconciler is reconcile over the process's services; prov (nil: door)
// is the provider whose own ledger the books are held against.
func newReconciler(cfg config.Config, st *store.Store, rdb redis.UniversalClient, tc client.Client, prov provider.Provider,
	grace time.Duration, log *slog.Logger) *reconcile.Reconciler {
	sagas := workflows.NewClient(tc, cfg.Temporal.TaskQueue).WithPayments(viaProvider(cfg))
	d := reconcile.Deps{
		MySQL:     st,
		Units:     stock.New(rdb, cfg.Redis.KeyPrefix),
		Outbox:    outbox.New(rdb, cfg.Redis.KeyPrefix),
		Sagas:     sagas,
		Workflows: snapshot.TemporalLister{Client: tc, Namespace: cfg.Temporal.Namespace},
		// Only a verified notification pays under stripe; door and testpay pay at the door too.
		RequirePayments: cfg.Payment.Provider == "stripe",
	}
	if viaProvider(cfg) {
		d.Refunds = sagas
	}
	// The books are held against the provider's own ledger, within a budget
	// of its rate (behind the provider's limiter, provider.Guard).
	if prov != nil {
		d.Ledger = books.Ledger{Name: cfg.Payment.Provider, Recorder: prov}
	}
	return reconcile.New(d, grace, log)
}

func printReconcile(w io.Writer, rep reconcile.Report) {
	for _, u := range rep.Unchecked {
		_, _ = fmt.Fprintf(w, "item %d: %s\n", u.ItemID, u.Reason)
	}
	for _, b := range rep.Books {
		for _, m := range b.Money {
			if m != (store.Money{Currency: m.Currency}) {
				_, _ = fmt.Fprintf(w, "item %d books: %s captured %d, refunded %d, owed back %d (minor units); %d refund(s) past the grace\n",
					b.ItemID, m.Currency, m.Captured, m.Refunded, m.RefundsPending, b.Stuck)
			}
		}
	}
	if len(rep.Findings) == 0 {
		if len(rep.Unchecked) > 0 {
			_, _ = fmt.Fprintf(w, "items %v: no drift found by the checks that ran\n", rep.Items)
			return
		}
		_, _ = fmt.Fprintf(w, "items %v: no drift\n", rep.Items)
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "item\tkind\torder\tdetail\trepaired\taction\t")
	for _, f := range rep.Findings {
		_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%s\t\n", f.ItemID, f.Kind, f.OrderID, f.Detail, f.Repaired, f.Action)
	}
	_ = tw.Flush()
}
