package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill/seckill/api/payhook"
	"github.com/seckill/seckill/cmd/seckill-bench/bench"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/migrations"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/worker"
)

// runFlags are `seckill-bench run`'s settings beside the stages'.
type runFlags struct {
	stagesFlags
	seckill       string
	standin       string
	name          string
	apiAddr       string
	stripeAPIAddr string
	workerAddr    string
	stripeAddr    string
	relayAddr     string
	keep          bool
	oidc          bool
}

// The Stripe stand-in's API key and webhook signing secret in the bench:
// its API, worker and stand-in share them (development only: SECKILL_DEV).
const (
	benchStripeKey    = "sk_test_seckill_bench"
	benchStripeSecret = "whsec_seckill_bench"
)

// validName is a bench slice's name: the MySQL user may create seckill_*
// databases, and the name is also the Redis key prefix.
var validName = regexp.MustCompile(`^seckill_[A-Za-z0-9_]+$`)

// newBenchRunCmd is what `make bench` runs: the bench's own slice of the
// stack (database, key prefix, topic, groups, task queue) made fresh, its own
// `seckill api` and `seckill worker` started, the stages run against them,
// and everything but the database (kept for inspection) removed however the
// run ends.
func newBenchRunCmd(a *app) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Prepare the bench's own database, keys, topic and task queue, start its api and worker, run the stages, clean up",
		Long: "make bench: a fresh MySQL database --name (dropped, re-created and migrated; item ids start at the current Unix\n" +
			"time x 1000 so Temporal's SeckillItemId never matches another database's items), Redis key prefix --name, its own\n" +
			"RocketMQ topic, groups and Temporal task queue; started from --seckill with logs in <out>/logs: `seckill api` on\n" +
			"--api-addr (SECKILL_PAYMENT_PROVIDER=door: stages 1 to 4, and stage 5's door pays), a second `seckill api` on\n" +
			"--stripe-api-addr and `seckill worker` (ops on --worker-addr) on SECKILL_PAYMENT_PROVIDER=stripe against the\n" +
			"Stripe stand-in (--seckill-stripe on --stripe-addr, its webhooks through the bench's relay on --webhook-relay-addr);\n" +
			"then the stages (see `stages --help`; stage 5, the payment stampede, runs here only). At the end, however it ends,\n" +
			"the roles stop, the bench's running sagas are terminated, its topics and keys deleted (--keep keeps them); the\n" +
			"database stays until the next run.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return a.runBench(cmd, &f) },
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.seckill, "seckill", "bin/seckill", "the seckill binary whose roles are started")
	fl.StringVar(&f.standin, "seckill-stripe", "bin/seckill-stripe", "the Stripe stand-in's binary (cmd/seckill-stripe)")
	fl.StringVar(&f.name, "name", "seckill_bench", "the bench's database and Redis key prefix (its topic, groups and task queue use it with '-')")
	fl.StringVar(&f.apiAddr, "api-addr", "127.0.0.1:8180", "the bench api's listen address, payments at the door (apart from make run's 8080)")
	fl.StringVar(&f.stripeAPIAddr, "stripe-api-addr", "127.0.0.1:8181", "the bench's second api's listen address, payments through Stripe (the stand-in)")
	fl.StringVar(&f.workerAddr, "worker-addr", "127.0.0.1:9191", "the bench worker's metrics and ops listener")
	fl.StringVar(&f.stripeAddr, "stripe-addr", "127.0.0.1:8192", "the bench's Stripe stand-in's listen address (apart from make run's 8092)")
	fl.StringVar(&f.relayAddr, "webhook-relay-addr", "127.0.0.1:8193", "where the stand-in's webhooks reach the bench, which relays them to the stripe api and times their answers")
	fl.IntVar(&f.paymentUnits, "payment-units", 10_000, "S of stage 5, the payment stampede: payments through the Stripe stand-in, beside S/2 door pays (0 leaves it out)")
	fl.IntVar(&f.paymentRounds, "payment-rounds", 3, "stage 5's rounds of door pays and Stripe payments taken in turn; the ratio is the median of the rounds'")
	fl.BoolVar(&f.paymentsOnly, "payments-only", false, "run stage 5 alone")
	fl.BoolVar(&f.keep, "keep", false, "keep the Redis keys and the topic at the end")
	fl.BoolVar(&f.oidc, "oidc", true, "serve a JWKS of one RS256 key, start the api taking its tokens beside HS256's, and run stage 1's sold-out answers with both (false: HS256 only)")
	return cmd
}

// sliceEnv is the environment that points a role at the bench's slice.
func (f *runFlags) sliceEnv() map[string]string {
	dash := strings.ReplaceAll(f.name, "_", "-")
	return map[string]string{
		"SECKILL_MYSQL_DATABASE": f.name, "SECKILL_REDIS_KEY_PREFIX": f.name,
		"SECKILL_ROCKETMQ_TOPIC": dash + "-orders", "SECKILL_ROCKETMQ_PRODUCER_GROUP": dash + "-api",
		"SECKILL_ROCKETMQ_CONSUMER_GROUP": dash + "-order-consumer", "SECKILL_WORKER_DLQ_GROUP": dash + "-dlq-handler",
		"SECKILL_TEMPORAL_TASK_QUEUE": dash + "-orders", "SECKILL_API_INSTANCE": dash + "-api",
		"SECKILL_API_ADDR": f.apiAddr, "SECKILL_WORKER_METRICS_ADDR": f.workerAddr,
	}
}

// The roles' payments. Stage 5 measures the path a shop on Stripe runs
// against the door's pay, in the same run, on the same machine and
// database: the worker and a second api run SECKILL_PAYMENT_PROVIDER=stripe
// (stripe-go against the Stripe stand-in; a Stripe URL other than Stripe's
// only with SECKILL_DEV), and the first api runs door, where a buyer's
// POST …/pay is the door's pay. Under stripe that pay answers 409 (only a
// verified notification pays): rather than a setting that would let a
// stripe api take pays at the door — a switch no shop may turn — the
// baseline is the same binary on the same slice with the provider a shop
// without one runs. The door api also serves stages 1 to 4, whose buyers
// pay at the door as before; each api wakes its own sagas at the default
// SECKILL_API_WAKE_RATE. The worker's reconcile, on stripe, reports the
// door-paid orders as paid_order_payment and their sales as
// books_unbalanced (report only): the bench's own checker judges the mixed
// sale (docs/performance.md, stage 5).

// stripeEnv is what the worker and the stripe api get.
func (f *runFlags) stripeEnv() []string {
	return []string{"SECKILL_DEV=1", "SECKILL_PAYMENT_PROVIDER=stripe", "SECKILL_PAYMENT_STRIPE_URL=http://" + f.stripeAddr,
		"SECKILL_PAYMENT_STRIPE_KEY=" + benchStripeKey, "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET=" + benchStripeSecret,
		"SECKILL_PAYMENT_RETURN_URL=http://" + f.stripeAPIAddr + "/#/orders/{order_id}"}
}

// stripeAPIEnv is the stripe api's: its own address and instance, the
// notification limit raised out of the way (the stage measures the
// decisions, not the limiter), and the provider's rate raised for the S
// checkouts, the stage's setup (at Stripe's 100 calls a second 10,000 take
// nearly two minutes; the stand-in's own cap is as high). The door api
// alone serves pprof (BENCH_API_PPROF_ADDR).
func (f *runFlags) stripeAPIEnv() []string {
	dash := strings.ReplaceAll(f.name, "_", "-")
	return append(f.stripeEnv(), "SECKILL_API_ADDR="+f.stripeAPIAddr, "SECKILL_API_INSTANCE="+dash+"-api-stripe",
		"SECKILL_PAYMENT_NOTIFY_RPS=100000", "SECKILL_PAYMENT_PROVIDER_RPS=10000", "SECKILL_API_PPROF_ADDR=")
}

// standinArgs start the stand-in: its webhooks to the bench's relay,
// signed with the api's secret, the bench's key only, a rate cap well
// above what the stage asks of it.
func (f *runFlags) standinArgs() []string {
	return []string{"-addr", f.stripeAddr, "-url", "http://" + f.stripeAddr, "-keys", benchStripeKey,
		"-webhook-url", "http://" + f.relayAddr + payhook.NotificationRoute, "-webhook-secret", benchStripeSecret, "-rps", "10000"}
}

// oidcEnv points the api at the bench's identity provider too, with the
// JWT secret set: with OIDC on, an unset one would turn HS256 off.
func (f *runFlags) oidcEnv(secret string) []string {
	if f.issuer == nil {
		return nil
	}
	return append(f.issuer.Env(), "SECKILL_JWT_SECRET="+secret)
}

// startIssuer starts the bench's identity provider unless --oidc=false (or
// stage 1 does not run); stop it after the roles.
func (f *runFlags) startIssuer(say func(string, ...any)) (stop func(), err error) {
	if !f.oidc || f.paymentsOnly {
		return func() {}, nil
	}
	if f.issuer, err = bench.StartIssuer(); err != nil {
		return nil, fmt.Errorf("the bench's identity provider: %w", err)
	}
	say("serving the bench's own JWKS (one RS256 key) on %s: the api takes its tokens beside HS256's", f.issuer.JWKSURL())
	return func() { _ = f.issuer.Close() }, nil
}

func (a *app) runBench(cmd *cobra.Command, f *runFlags) (err error) {
	ctx := cmd.Context()
	if !validName.MatchString(f.name) {
		return fmt.Errorf("--name %q: want seckill_[A-Za-z0-9_]+ (the MySQL user may create seckill_* databases)", f.name)
	}
	if _, err := os.Stat(f.seckill); err != nil {
		return fmt.Errorf("--seckill: %w", err)
	}
	for k, v := range f.sliceEnv() {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	if a.cfg, err = config.Load(); err != nil {
		return err
	}
	for _, addr := range []string{f.apiAddr, f.stripeAPIAddr, f.stripeAddr, f.relayAddr} {
		if answers(ctx, "http://"+addr+"/healthz") {
			return fmt.Errorf("something already answers on %s: stop it or pass another address", addr)
		}
	}
	if _, err := os.Stat(f.standin); err != nil {
		return fmt.Errorf("--seckill-stripe: %w", err)
	}
	logs := filepath.Join(f.outDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	tc, err := temporalx.Dial(ctx, a.cfg.Temporal, a.log)
	if err != nil {
		return err
	}
	defer tc.Close()
	say := func(format string, args ...any) {
		_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "[bench] "+format+"\n", args...)
	}
	say("preparing the bench's own database %s, key prefix %s:, topic %s, task queue %s",
		f.name, f.name, a.cfg.RocketMQ.Topic, a.cfg.Temporal.TaskQueue)
	// Sagas a killed run left behind: their timers would fire into the new
	// run's database.
	if n, err := a.terminateSagas(ctx, tc, "seckill-bench run: start"); err != nil {
		a.log.Warn("sagas of an earlier run not terminated", "err", err)
	} else if n > 0 {
		say("terminated %d sagas an earlier run left running", n)
	}
	if err := a.freshDatabase(ctx); err != nil {
		return err
	}
	stopIssuer, err := f.startIssuer(say)
	if err != nil {
		return err
	}
	defer stopIssuer() // after the roles: the api's refreshes fetch from it
	relay, err := bench.StartRelay(f.relayAddr, "http://"+f.stripeAPIAddr+payhook.NotificationRoute)
	if err != nil {
		return fmt.Errorf("the bench's webhook relay: %w", err)
	}
	defer func() { _ = relay.Close() }() // after the roles
	var roles []role
	defer func() {
		for _, r := range roles { // the apis first: their relays flush the outbox on SIGTERM; the stand-in last
			r.c.Stop(30 * time.Second)
		}
		if !f.keep {
			say("cleaning up: sagas still running on task queue %s, topic %s, keys %s:*", a.cfg.Temporal.TaskQueue, a.cfg.RocketMQ.Topic, f.name)
			err = errors.Join(err, a.cleanSlice(context.WithoutCancel(ctx), tc))
		}
	}()
	if err := a.dropKeys(ctx); err != nil {
		return err
	}
	// A fresh topic: no message of an earlier, interrupted run reaches this
	// run's worker.
	if err := a.topics(ctx, false); err != nil {
		a.log.Debug("delete topics", "err", err)
	}
	if err := a.topics(ctx, true); err != nil {
		return err
	}
	say("starting seckill api on %s (payments at the door), seckill api on %s and seckill worker on Stripe, "+
		"the Stripe stand-in on %s (its webhooks through %s; logs in %s)", f.apiAddr, f.stripeAPIAddr, f.stripeAddr, f.relayAddr, logs)
	if roles, err = f.startRoles(logs, a.cfg.JWTSecret.Value()); err != nil {
		return err
	}
	f.apiURL, f.apiPID, f.workerPID = "http://"+f.apiAddr, roles[0].c.PID(), roles[2].c.PID()
	f.workerOps = "http://" + f.workerAddr
	f.stripe = &bench.StripePath{APIURL: "http://" + f.stripeAPIAddr, APIPID: roles[1].c.PID(), StandinURL: "http://" + f.stripeAddr,
		Key: benchStripeKey, Relay: relay}
	if err := waitRoles(ctx, roles, logs); err != nil {
		return err
	}
	say("running the stages (api pids %d (door) and %d (stripe), worker pid %d)", f.apiPID, f.stripe.APIPID, f.workerPID)
	return a.onTarget(&f.benchFlags, func(cmd *cobra.Command, c checkDeps) error { return a.runStages(cmd, c, &f.stagesFlags) })(cmd, nil)
}

// role is a process the bench started: its name (its log's) and where it
// answers once ready.
type role struct {
	name, ready string
	c           *proc.Child
}

// startRoles starts, on the bench's slice, `seckill api` on door, `seckill
// api` and `seckill worker` on stripe, and the Stripe stand-in (secret: the
// JWT secret the door api keeps beside OIDC); on an error, with the roles
// started so far.
func (f *runFlags) startRoles(logs, secret string) ([]role, error) {
	base := append(os.Environ(), "SECKILL_LOG_LEVEL=info")
	specs := []struct {
		name, ready string
		spec        proc.Spec
	}{
		{"api", "http://" + f.apiAddr + "/readyz", proc.Spec{Path: f.seckill, Args: []string{"api"},
			Env: append(append(slices.Clip(base), "SECKILL_PAYMENT_PROVIDER=door"), f.oidcEnv(secret)...)}},
		{"api-stripe", "http://" + f.stripeAPIAddr + "/readyz", proc.Spec{Path: f.seckill, Args: []string{"api"},
			Env: append(slices.Clip(base), f.stripeAPIEnv()...)}},
		{"worker", "http://" + f.workerAddr + "/healthz", proc.Spec{Path: f.seckill, Args: []string{"worker"},
			Env: append(slices.Clip(base), f.stripeEnv()...)}},
		{"seckill-stripe", "http://" + f.stripeAddr + "/healthz", proc.Spec{Path: f.standin, Args: f.standinArgs()}},
	}
	var roles []role
	for _, s := range specs {
		s.spec.Log = filepath.Join(logs, s.name+".log")
		c, err := proc.Start(s.spec)
		if err != nil {
			return roles, fmt.Errorf("start %s: %w", s.name, err)
		}
		roles = append(roles, role{name: s.name, ready: s.ready, c: c})
	}
	return roles, nil
}

// answers says whether url answers at all.
func answers(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return true
}

// waitRoles waits until every role answers ready, failing as soon as one
// exits.
func waitRoles(ctx context.Context, roles []role, logs string) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		ready := true
		for _, r := range roles {
			select {
			case <-r.c.Done():
				return fmt.Errorf("%s exited (%v): see %s", r.name, r.c.Err(), filepath.Join(logs, r.name+".log"))
			default:
			}
			ready = ready && bench.WaitReady(ctx, r.ready, time.Second) == nil
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the bench's roles not ready after 60 s: see %s", logs)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freshDatabase drops and re-creates the bench's database, migrates it and
// starts its item ids at the current Unix time x 1000.
func (a *app) freshDatabase(ctx context.Context) error {
	server := a.cfg.MySQL
	server.Database = ""
	dsn, err := server.DSN()
	if err != nil {
		return err
	}
	db, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return fmt.Errorf("connect to MySQL: %w", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return err
	}
	defer func() { _ = sqlDB.Close() }()
	name := "`" + a.cfg.MySQL.Database + "`"
	for _, q := range []string{"DROP DATABASE IF EXISTS " + name, "CREATE DATABASE " + name + " CHARACTER SET utf8mb4"} {
		if err := db.WithContext(ctx).Exec(q).Error; err != nil {
			return fmt.Errorf("prepare database %s: %w", name, err)
		}
	}
	dsn, err = a.cfg.MySQL.DSN()
	if err != nil {
		return err
	}
	m, err := migrations.New(dsn)
	if err != nil {
		return err
	}
	defer func() { _ = m.Close() }()
	if err := m.Up(); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	q := fmt.Sprintf("ALTER TABLE %s.item AUTO_INCREMENT = %d", name, time.Now().Unix()*1000)
	if err := db.WithContext(ctx).Exec(q).Error; err != nil {
		return fmt.Errorf("set the item ids of %s: %w", name, err)
	}
	return nil
}

// dropKeys unlinks every key of the bench's prefix, on every master of a
// cluster.
func (a *app) dropKeys(ctx context.Context) error {
	rdb, err := redisx.Open(a.cfg.Redis, redisx.Options{PoolSize: 4, Name: "seckill-bench"})
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	drop := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, a.cfg.Redis.KeyPrefix+":*", 1000).Iterator()
		for it.Next(ctx) {
			if err := c.Unlink(ctx, it.Val()).Err(); err != nil {
				return err
			}
		}
		return it.Err()
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, drop)
	} else if c, ok := rdb.(*redis.Client); ok {
		err = drop(ctx, c)
	} else {
		err = fmt.Errorf("redis client %T: cannot scan its nodes", rdb)
	}
	if err != nil {
		return fmt.Errorf("delete the Redis keys %s:*: %w", a.cfg.Redis.KeyPrefix, err)
	}
	return nil
}

// topics creates the bench's topic, or deletes it and its dead-letter topic.
func (a *app) topics(ctx context.Context, create bool) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := a.cfg.RocketMQ
	if create {
		return queue.EnsureTopic(ctx, c, c.Topic, 4)
	}
	return errors.Join(queue.DeleteTopic(ctx, c, c.Topic), queue.DeleteTopic(ctx, c, worker.DeadLetterTopic(c.ConsumerGroup)))
}

// terminateSagas terminates the sagas still running on the bench's task
// queue (stage 2's orders wait 24 h for payment), 32 at a time.
func (a *app) terminateSagas(ctx context.Context, tc client.Client, reason string) (int, error) {
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running'", a.cfg.Temporal.TaskQueue)
	var n atomic.Int64
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: a.cfg.Temporal.Namespace, Query: query, PageSize: 1000, NextPageToken: token})
		if err != nil {
			return int(n.Load()), fmt.Errorf("list the bench's running sagas: %w", err)
		}
		var g errgroup.Group
		g.SetLimit(32)
		for _, e := range resp.Executions {
			g.Go(func() error {
				if err := tc.TerminateWorkflow(ctx, e.Execution.WorkflowId, e.Execution.RunId, reason); err != nil {
					a.log.Debug("terminate saga", "workflow_id", e.Execution.WorkflowId, "err", err)
					return nil
				}
				n.Add(1)
				return nil
			})
		}
		_ = g.Wait() // each failure is logged; the next run terminates what is left
		if token = resp.NextPageToken; len(token) == 0 {
			return int(n.Load()), nil
		}
	}
}

// cleanSlice terminates the bench's running sagas and deletes its topics and
// keys, each step on its own time (a step that ran out leaves the others
// theirs); the database stays for inspection.
func (a *app) cleanSlice(ctx context.Context, tc client.Client) error {
	sagas, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	n, err := a.terminateSagas(sagas, tc, "seckill-bench run: cleanup")
	a.log.Log(ctx, slog.LevelInfo, "bench sagas terminated", "count", n)
	keys, cancelKeys := context.WithTimeout(ctx, time.Minute)
	defer cancelKeys()
	return errors.Join(err, a.topics(ctx, false), a.dropKeys(keys))
}
