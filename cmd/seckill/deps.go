package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/sdk/client"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/internal/temporalx"
	"github.com/seckill/seckill/store"
)

// deps opens a role's connections and keeps its closers, which run last first.
type deps struct {
	cfg     config.Config
	log     *slog.Logger
	closers []func() error
}

func (d *deps) onClose(stop func() error) { d.closers = append(d.closers, stop) }

func (d *deps) onStop(stop func()) { d.onClose(func() error { stop(); return nil }) }

func (d *deps) close() error {
	var errs []error
	for i := len(d.closers) - 1; i >= 0; i-- {
		errs = append(errs, d.closers[i]())
	}
	d.closers = nil
	return errors.Join(errs...)
}

// stoppedWhileStarting makes a start that failed because the role was told
// to stop a clean stop: a supervisor must not read it as a crash.
func (d *deps) stoppedWhileStarting(ctx context.Context, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	d.log.Info("stopped while starting", "err", err)
	return nil
}

func (d *deps) mysql(ctx context.Context) (*store.Store, error) {
	st, err := store.Open(ctx, d.cfg.MySQL)
	if err != nil {
		return nil, err
	}
	d.onStop(func() { _ = st.Close() })
	return st, nil
}

// redis opens a Redis client; with ping it fails when Redis does not answer now.
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
	d.onStop(func() { _ = rdb.Close() })
	return rdb, nil
}

func (d *deps) temporal(ctx context.Context) (client.Client, error) {
	tc, err := temporalx.Dial(ctx, d.cfg.Temporal, d.log)
	if err != nil {
		return nil, err
	}
	d.onStop(tc.Close)
	return tc, nil
}

// listen binds srv.Addr and pushes srv's stop (drain at most drain) onto the
// closers; serve starts answering and reports the server failing.
func (d *deps) listen(what string, srv *http.Server, drain time.Duration) (serve func() <-chan error, err error) {
	ln, err := net.Listen("tcp", srv.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", what, srv.Addr, err)
	}
	d.onStop(func() {
		ctx, cancel := context.WithTimeout(context.Background(), drain)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			d.log.Warn(what+" shutdown", "err", err) // the API's open event streams hold it to the end
		}
		_ = ln.Close() // not served when a later start failed
	})
	return func() <-chan error {
		failed := make(chan error, 1)
		go func() {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				d.log.Warn(what+" server", "err", err)
				failed <- fmt.Errorf("%s server: %w", what, err)
			}
		}()
		d.log.Info(what+" listening", "addr", "http://"+ln.Addr().String())
		return failed
	}, nil
}
