package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/store"
)

// deps opens the connections of one role, the one place every role does
// it, and closes them in reverse order.
type deps struct {
	cfg     config.Config
	log     *slog.Logger
	closers []func()
}

func newDeps(cfg config.Config, log *slog.Logger) *deps { return &deps{cfg: cfg, log: log} }

// close closes what was opened, last first.
func (d *deps) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// mysql opens the system of record (pinging it).
func (d *deps) mysql(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, d.cfg.MySQL)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, func() { _ = st.Close() })
	return st, nil
}

// redis opens a Redis client (plain, cluster or sentinel per config). With
// ping it fails when Redis does not answer now; without, commands fail
// until it does (the API serves its cheap answers meanwhile).
func (d *deps) redis(ctx context.Context, o redisx.Options, ping bool) (redis.UniversalClient, error) {
	rdb, err := redisx.Open(d.cfg.Redis, o)
	if err != nil {
		return nil, err
	}
	if ping {
		if err := redisx.Ping(ctx, rdb); err != nil {
			_ = rdb.Close()
			return nil, fmt.Errorf("%s: %w", redisx.Describe(d.cfg.Redis), err)
		}
	}
	d.closers = append(d.closers, func() { _ = rdb.Close() })
	return rdb, nil
}

// temporal dials the Temporal frontend.
func (d *deps) temporal(ctx context.Context) (client.Client, error) {
	tc, err := temporalx.Dial(ctx, d.cfg.Temporal, d.log)
	if err != nil {
		return nil, err
	}
	d.closers = append(d.closers, tc.Close)
	return tc, nil
}
