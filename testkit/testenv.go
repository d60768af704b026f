// Package testkit gives integration tests isolated slices of the real local
// stack (scripts/stack up): a fresh migrated MySQL database per test, a
// private Redis key prefix, and the stack's RocketMQ and Temporal addresses.
// A service that is down fails the test with a message naming it; nothing is
// skipped silently.
package testkit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/migrations"
	"github.com/seckill/seckill/store"
)

// Config returns the configuration the tests run with (SECKILL_* or defaults).
func Config(t testing.TB) config.Config {
	t.Helper()
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Suffix returns a short random string for unique names.
func Suffix() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Integration skips t under -short: it needs the real services
// (scripts/stack up). `go test -short ./...` runs every unit test with no
// service reachable; `make test` runs everything.
func Integration(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the real services (scripts/stack up); skipped with -short")
	}
}

// MySQL creates a fresh database named seckill_t_<random>, applies the
// migrations and returns a Store on it and its config. The database is dropped
// when the test ends.
func MySQL(t testing.TB) (*store.Store, config.MySQL) {
	t.Helper()
	Integration(t)
	cfg := Config(t).MySQL
	name := "seckill_t_" + Suffix()
	dsn, err := cfg.DSN()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatalf("MariaDB at %s:%d is not reachable (run scripts/stack up): %v", cfg.Host, cfg.Port, err)
	}
	if err := admin.Exec("CREATE DATABASE `" + name + "` CHARACTER SET utf8mb4").Error; err != nil {
		t.Fatalf("create test database %s: %v", name, err)
	}
	adminDB, _ := admin.DB()
	t.Cleanup(func() {
		_ = admin.Exec("DROP DATABASE IF EXISTS `" + name + "`").Error
		_ = adminDB.Close()
	})
	cfg.Database = name
	if dsn, err = cfg.DSN(); err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	_ = m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, cfg
}

// Redis returns a client on the stack's Redis (plain or cluster, as the
// roles open it from SECKILL_REDIS_*) and a key prefix private to this test;
// every key under the prefix is deleted when the test ends.
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	Integration(t)
	cfg := Config(t).Redis
	rdb, err := redisx.Open(cfg, redisx.Options{PoolSize: 128, Name: "seckill-test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := redisx.Ping(ctx, rdb); err != nil {
		t.Fatalf("%s is not reachable (run scripts/stack up): %v", redisx.Describe(cfg), err)
	}
	prefix := "seckill_t_" + Suffix()
	t.Cleanup(func() {
		ctx := context.Background()
		clean := func(ctx context.Context, c redis.UniversalClient) error {
			iter := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
			for iter.Next(ctx) {
				_ = c.Del(ctx, iter.Val()).Err()
			}
			return nil
		}
		if cc, ok := rdb.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return clean(ctx, c) })
		} else {
			_ = clean(ctx, rdb)
		}
		_ = rdb.Close()
	})
	return rdb, prefix
}

// Name returns a name unique to this run, for topics, groups and task queues.
func Name(t testing.TB, base string) string {
	t.Helper()
	s := strings.NewReplacer("/", "-", " ", "-", "_", "-").Replace(t.Name())
	if len(s) > 40 {
		s = s[:40]
	}
	return fmt.Sprintf("%s-%s-%s", base, strings.ToLower(s), Suffix())
}

// Logger is the logger integration tests hand to the code under test:
// warnings and errors to stderr (not t.Log: background goroutines may still
// log after the test returned).
func Logger(testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Workflows is the part of a Temporal client TerminateLeftovers needs
// (client.Client).
type Workflows interface {
	ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
	TerminateWorkflow(ctx context.Context, workflowID, runID, reason string, details ...any) error
}

var _ Workflows = client.Client(nil)

// TerminateLeftovers ends the sagas a test left running on its private task
// queue, which no worker will serve again (their database and Redis keys are
// gone): the dev server should not accumulate open workflows. Register it
// with t.Cleanup. Visibility answers a page at a time and lags behind the
// terminations, so it lists again until nothing runs (at most 20 rounds).
func TerminateLeftovers(tc Workflows, namespace, taskQueue string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running'", taskQueue)
	for range 20 {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: namespace, Query: q, PageSize: 1000})
		if err != nil || len(resp.GetExecutions()) == 0 {
			return
		}
		for _, e := range resp.GetExecutions() {
			_ = tc.TerminateWorkflow(ctx, e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId(), "test finished")
		}
	}
}

// Deduction reads an order's stock_deduction marker; ok is false when the
// order never took a unit from the stock row.
func Deduction(ctx context.Context, st *store.Store, orderID string) (d store.StockDeduction, ok bool, err error) {
	res := st.DB().WithContext(ctx).Where("order_id = ?", orderID).Limit(1).Find(&d)
	return d, res.RowsAffected == 1, res.Error
}
