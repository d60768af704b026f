// Command seckill-bench measures a running seckill deployment: one flash
// sale with its invariant checks (the root command), every pipeline stage
// against its own baseline on a running deployment (stages), the same on a
// slice of the stack it prepares and roles it starts itself (run: what
// `make bench` runs), the invariant checker alone (check), and helpers
// (topic, baseline-http). It is a binary of its own: the seckill binary does not link
// it, and it reaches the worker only through the worker's ops listener.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/cmd/seckill-bench/bench"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/invariant"
	"github.com/seckill/seckill/snapshot"
	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/store"
)

// app is what every subcommand gets: the parsed config and the logger.
type app struct {
	cfg config.Config
	log *slog.Logger
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "seckill-bench:", err)
		os.Exit(1)
	}
}

// benchFlags are the settings `bench` and `bench stages` share.
type benchFlags struct {
	apiURL         string
	units          int64
	buyers         int
	rate           float64
	connections    int
	timeout        time.Duration
	attempts       int
	lead           time.Duration
	paymentTimeout time.Duration
	payFraction    float64
	waitTimeouts   bool
	drainTimeout   time.Duration
	apiPID         int
	workerPID      int
	workerOps      string
	outDir         string
	noTemporal     bool
}

func (f *benchFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.apiURL, "api", "http://127.0.0.1:8080", "base URL of the running API")
	fl.Int64Var(&f.units, "units", 10_000, "S: units of the flash-sale item")
	fl.IntVar(&f.buyers, "buyers", 100_000, "U: buyers, one token each")
	fl.Float64Var(&f.rate, "rate", 0, "open loop: purchase attempts per second (0 = closed loop with --connections)")
	fl.IntVar(&f.connections, "connections", 64, "connections (closed loop: requests in flight)")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Second, "per-request timeout")
	fl.IntVar(&f.attempts, "attempts", 5, "attempts per buyer (429 honours Retry-After; 503 and network errors retry)")
	fl.DurationVar(&f.lead, "lead", 3*time.Second, "the sale starts this long after the item is created")
	fl.DurationVar(&f.paymentTimeout, "payment-timeout", 30*time.Second, "the item's payment window (5s..24h)")
	fl.Float64Var(&f.payFraction, "pay-fraction", 0.5, "fraction of orders paid, each at its 202 (again once it waits for payment if the door refused it while QUEUED)")
	fl.BoolVar(&f.waitTimeouts, "wait-timeouts", true, "wait for every unpaid order to time out, then check that every unpaid unit is back")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 40*time.Minute, "give up waiting for the pipeline to drain after this long")
	fl.IntVar(&f.apiPID, "api-pid", 0, "pid of the API process for memory figures (0: find the seckill api process)")
	fl.IntVar(&f.workerPID, "worker-pid", 0, "pid of the worker process for memory figures (0: find the seckill worker process)")
	fl.StringVar(&f.workerOps, "worker-ops", "", "the worker's ops listener (http://host:port); stages holds its order consumer there during stage 2 (default http://$SECKILL_WORKER_METRICS_ADDR)")
	fl.StringVar(&f.outDir, "out", "bench-results", "directory for the JSON and HTML reports")
	fl.BoolVar(&f.noTemporal, "no-temporal", false, "skip the Temporal invariant checks")
}

func (f *benchFlags) load() bench.Load {
	return bench.Load{Rate: f.rate, Connections: f.connections, Timeout: f.timeout}
}

func (f *benchFlags) sale() bench.FlashSale {
	return bench.FlashSale{APIURL: f.apiURL, Units: f.units, Buyers: f.buyers, FirstBuyer: time.Now().Unix()%1_000_000*1000 + 1,
		Load: f.load(), MaxAttempts: f.attempts, Lead: f.lead, PaymentTimeout: f.paymentTimeout,
		PayFraction: f.payFraction, WaitTimeouts: f.waitTimeouts, DrainTimeout: f.drainTimeout,
		APIPID: f.apiPID, WorkerPID: f.workerPID}
}

// checkDeps are what the bench reads: MySQL, Redis and (unless disabled)
// Temporal.
type checkDeps struct {
	bench.Deps
	temporal client.Client // nil when disabled
	closers  []func()
}

func (c *checkDeps) close() {
	for i := len(c.closers) - 1; i >= 0; i-- {
		c.closers[i]()
	}
}

// openCheckDeps opens MySQL, Redis and (unless noTemporal) Temporal.
func (a *app) openCheckDeps(ctx context.Context, noTemporal bool) (c checkDeps, err error) {
	defer func() {
		if err != nil {
			c.close()
		}
	}()
	st, err := store.Open(ctx, a.cfg.MySQL)
	if err != nil {
		return c, err
	}
	c.closers = append(c.closers, func() { _ = st.Close() })
	rdb, err := redisx.Open(a.cfg.Redis, redisx.Options{PoolSize: 16, Name: "seckill-bench"})
	if err != nil {
		return c, err
	}
	c.closers = append(c.closers, func() { _ = rdb.Close() })
	if err := redisx.Ping(ctx, rdb); err != nil {
		return c, fmt.Errorf("%s: %w", redisx.Describe(a.cfg.Redis), err)
	}
	c.Deps = bench.Deps{Store: st, Stock: stock.New(rdb, a.cfg.Redis.KeyPrefix)}
	if !noTemporal {
		if c.temporal, err = temporalx.Dial(ctx, a.cfg.Temporal, a.log); err != nil {
			return c, err
		}
		c.closers = append(c.closers, c.temporal.Close)
		c.Workflows = snapshot.TemporalLister{Client: c.temporal, Namespace: a.cfg.Temporal.Namespace}
	}
	return c, nil
}

// onTarget is a command's RunE that opens what the bench reads
// (openCheckDeps), waits until the API at f.apiURL answers, runs run and
// closes what it opened.
func (a *app) onTarget(f *benchFlags, run func(cmd *cobra.Command, c checkDeps) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		c, err := a.openCheckDeps(cmd.Context(), f.noTemporal)
		if err != nil {
			return err
		}
		defer c.close()
		if err := bench.WaitReady(cmd.Context(), strings.TrimRight(f.apiURL, "/")+"/healthz", 10*time.Second); err != nil {
			return err
		}
		return run(cmd, c)
	}
}

func newRoot() *cobra.Command {
	a := &app{}
	var f benchFlags
	cmd := &cobra.Command{
		Use:           "seckill-bench",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			a.cfg, a.log = cfg, cfg.Log.Logger(cmd.ErrOrStderr())
			slog.SetDefault(a.log)
			return nil
		},
		Short: "Run a flash sale against a running API and worker, then check the invariants in MySQL, Redis and Temporal",
		Long: "Creates an item with --units units starting --lead ahead, mints tokens for --buyers buyers and fires their\n" +
			"purchase attempts at the start instant; pays --pay-fraction of the orders at their 202, waits for every\n" +
			"accepted order to be persisted, lets the rest time out, and checks the invariants. Writes <out>/sale-<time>.{json,html}.\n" +
			"Exits non-zero on any invariant violation.",
		Args: cobra.NoArgs,
		RunE: a.onTarget(&f, func(cmd *cobra.Command, c checkDeps) error {
			ctx := cmd.Context()
			d := c.Deps
			s := f.sale()
			s.JWTSecret, s.Progress, s.Log = []byte(a.cfg.JWTSecret.Value()), cmd.ErrOrStderr(), a.log
			rep, err := s.Run(ctx, d)
			if rep == nil {
				return err
			}
			bench.PrintSale(cmd.OutOrStdout(), rep)
			stamp := rep.At.Format("20060102-150405")
			jsonPath := filepath.Join(f.outDir, "sale-"+stamp+".json")
			htmlPath := filepath.Join(f.outDir, "sale-"+stamp+".html")
			if werr := bench.WriteJSON(jsonPath, rep); werr != nil {
				return werr
			}
			if werr := bench.WriteSaleHTML(htmlPath, rep); werr != nil {
				return werr
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "\nreports: %s %s\n", jsonPath, htmlPath)
			if err != nil {
				return err
			}
			if rep.Invariants != nil && !rep.Invariants.OK() {
				return fmt.Errorf("%w: %s", bench.ErrViolations, violationList(rep.Invariants))
			}
			return nil
		}),
	}
	f.register(cmd)
	cmd.AddCommand(newBenchRunCmd(a), newBenchStagesCmd(a), newBaselineHTTPCmd(a), newBenchCheckCmd(a), newBenchTopicCmd(a))
	return cmd
}

func violationList(r *invariant.Report) string {
	var s []string
	for _, v := range r.Violations {
		s = append(s, fmt.Sprintf("%s by %d", v.Name, v.Amount))
	}
	return strings.Join(s, ", ")
}

func newBaselineHTTPCmd(a *app) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "baseline-http",
		Short: "Serve the bare gin baseline: POST/GET " + bench.BarePath + " returns fixed JSON, no middleware",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.log.Info("bare gin baseline listening", "addr", addr, "path", bench.BarePath)
			return bench.ServeBareGin(cmd.Context(), addr)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8089", "listen address")
	return cmd
}

func newBenchCheckCmd(a *app) *cobra.Command {
	var (
		item          int64
		afterTimeouts bool
		noTemporal    bool
	)
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Check one item's invariants in MySQL, Redis and Temporal (accepted orders taken from MySQL)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			c, err := a.openCheckDeps(ctx, noTemporal)
			if err != nil {
				return err
			}
			defer c.close()
			d := c.Deps
			var acc []invariant.Accepted
			if err := d.Store.DB().WithContext(ctx).Raw("SELECT order_id, user_id FROM seckill_order WHERE item_id = ?", item).
				Scan(&acc).Error; err != nil {
				return err
			}
			rep, err := invariant.Check(ctx, invariant.Deps{Store: d.Store, Stock: d.Stock, Workflows: d.Workflows},
				invariant.Input{ItemID: item, Accepted: acc, AfterTimeouts: afterTimeouts})
			if err != nil {
				return err
			}
			bench.PrintInvariants(cmd.OutOrStdout(), &bench.SaleReport{Invariants: &rep})
			if !rep.OK() {
				return fmt.Errorf("%w: %s", bench.ErrViolations, violationList(&rep))
			}
			return nil
		},
	}
	cmd.Flags().Int64Var(&item, "item", 0, "item id")
	cmd.Flags().BoolVar(&afterTimeouts, "after-timeouts", false, "every payment window has closed: unpaid units must be back")
	cmd.Flags().BoolVar(&noTemporal, "no-temporal", false, "skip the Temporal checks")
	_ = cmd.MarkFlagRequired("item")
	return cmd
}

// stagesFlags are the settings of `bench stages` beside benchFlags.
type stagesFlags struct {
	benchFlags
	bareAddr         string
	duration         time.Duration
	rounds           int
	sagaOrders       int
	stage2Runs       int
	waitingWorkflows int
	luaUnits         int64
	latency          int
	skipFull         bool
	paymentUnits     int
	paymentRounds    int
	paymentsOnly     bool
	doc              string
	issuer           *bench.Issuer // the identity provider `run` started, if any
	// stripe is stage 5's path, which only `run` starts (and registers
	// stage 5's flags for): its Stripe stand-in, the api on stripe, the relay.
	stripe *bench.StripePath
}

func (f *stagesFlags) register(cmd *cobra.Command) {
	f.benchFlags.register(cmd)
	cmd.Flags().StringVar(&f.bareAddr, "bare-addr", "127.0.0.1:8089", "listen address of the bare gin baseline (started as a child process)")
	cmd.Flags().DurationVar(&f.duration, "duration", 3*time.Second, "length of each fixed-duration HTTP window (stage 1's rounds, stage 2's bare gin)")
	cmd.Flags().IntVar(&f.rounds, "rounds", 5, "stage 1's rounds: bare gin and the sold-out answers (and with the control room open) measured in turn; the ratio is the median of the rounds'")
	cmd.Flags().IntVar(&f.sagaOrders, "saga-orders", 4000, "purchases accepted in stage 2 and sagas timed in stage 3 (and minimal workflows)")
	cmd.Flags().IntVar(&f.stage2Runs, "stage2-runs", 3, "stage 2's sales of --saga-orders units, one after the other: figures are their median, with min and max")
	cmd.Flags().IntVar(&f.waitingWorkflows, "waiting-workflows", 2000, "waiting workflows (local activity, 1 s timer, local activity) in the yardstick of stages 3b and 4; 0 leaves it out")
	cmd.Flags().Int64Var(&f.luaUnits, "lua-units", 50_000, "reservations in the direct Lua baseline")
	cmd.Flags().IntVar(&f.latency, "latency-units", 1500, "units of stage 3b's sale (buyer-facing latency, every order paid; 0 leaves it out)")
	cmd.Flags().BoolVar(&f.skipFull, "skip-full", false, "leave out stage 4 (the full flash sale)")
	cmd.Flags().StringVar(&f.doc, "doc", "docs/performance.md", "markdown file whose bench block gets the latest figures (empty: none)")
}

func newBenchStagesCmd(a *app) *cobra.Command {
	var f stagesFlags
	cmd := &cobra.Command{
		Use:   "stages",
		Short: "Measure each pipeline stage against its own baseline in one run (make bench)",
		Long: "1. bare gin endpoint vs purchase attempts on a sold-out item, side by side in --rounds rounds; 2. bare gin and the\n" +
			"reservation Lua script via go-redis, just before and after each sale, vs accepted purchases/s over HTTP (--stage2-runs sales); 3. a minimal workflow (three no-op local activities) vs\n" +
			"sagas/s from message to PENDING_PAYMENT; 3b and 4. a sale whose orders are paid at their 202, and the full flash\n" +
			"sale, against a waiting workflow (local activity, timer, local activity). Stage 5, the payment stampede through the\n" +
			"Stripe stand-in, needs the processes `seckill-bench run` starts: it runs there. Needs `seckill api` and `seckill\n" +
			"worker` running. Writes <out>/latest.json, a timestamped copy, the sale's HTML page, and the figures into --doc.",
		Args: cobra.NoArgs,
		RunE: a.onTarget(&f.benchFlags, func(cmd *cobra.Command, c checkDeps) error { return a.runStages(cmd, c, &f) }),
	}
	f.register(cmd)
	return cmd
}

// runStages starts the bare gin baseline as a child process, runs the
// stages against it and the API, and writes their reports.
func (a *app) runStages(cmd *cobra.Command, c checkDeps, f *stagesFlags) error {
	ctx := cmd.Context()
	d, tc := c.Deps, c.temporal
	if f.workerOps == "" {
		f.workerOps = "http://" + a.cfg.Worker.MetricsAddr
	}
	if err := os.MkdirAll(f.outDir, 0o755); err != nil {
		return err
	}
	child, err := bench.StartChild([]string{"baseline-http", "--addr", f.bareAddr},
		filepath.Join(f.outDir, "baseline-http.log"))
	if err != nil {
		return err
	}
	defer bench.StopChild(child)
	bareURL := "http://" + f.bareAddr
	if err := bench.WaitReady(ctx, bareURL+"/healthz", 10*time.Second); err != nil {
		return err
	}
	full := f.sale()
	if full.APIPID == 0 {
		full.APIPID = bench.FindPID("api")
	}
	s := bench.Stages{Cfg: a.cfg, APIURL: f.apiURL, BareURL: bareURL, BarePID: child.PID(), Load: f.load(), HTTPDuration: f.duration, Rounds: f.rounds,
		SagaOrders: f.sagaOrders, Stage2Runs: f.stage2Runs, WaitingWorkflows: f.waitingWorkflows, LuaUnits: f.luaUnits, LatencyUnits: f.latency, Full: full, SkipFull: f.skipFull, Temporal: tc,
		PaymentUnits: f.paymentUnits, PaymentRounds: f.paymentRounds, PaymentsOnly: f.paymentsOnly, Stripe: f.stripe,
		WorkerOps: f.workerOps, OIDC: f.issuer,
		Progress: cmd.ErrOrStderr(), Log: a.log}
	rep := s.Run(ctx, d)
	if err := a.writeStagesReport(cmd, f, rep); err != nil {
		return err
	}
	if len(rep.Errors) > 0 {
		return errors.New(strings.Join(rep.Errors, "; "))
	}
	return nil
}

// writeStagesReport prints the stages' figures and writes them to
// <out>/latest.json, a timestamped copy, the sale's HTML page and --doc.
func (a *app) writeStagesReport(cmd *cobra.Command, f *stagesFlags, rep *bench.StagesReport) error {
	bench.PrintRatios(cmd.OutOrStdout(), rep)
	if rep.Sale != nil {
		bench.PrintSale(cmd.OutOrStdout(), rep.Sale)
		if err := bench.WriteSaleHTML(filepath.Join(f.outDir, "latest-sale.html"), rep.Sale); err != nil {
			return err
		}
	}
	stamp := rep.At.Format("20060102-150405")
	for _, p := range []string{"latest.json", "stages-" + stamp + ".json"} {
		if err := bench.WriteJSON(filepath.Join(f.outDir, p), rep); err != nil {
			return err
		}
	}
	_, _ = fmt.Fprintf(cmd.OutOrStdout(), "\nresults: %s\n", filepath.Join(f.outDir, "latest.json"))
	if f.doc != "" {
		if err := bench.UpdateDoc(f.doc, rep); err != nil {
			a.log.Warn("docs not updated", "doc", f.doc, "err", err)
		} else {
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "updated %s\n", f.doc)
		}
	}
	return nil
}
