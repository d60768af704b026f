// Package redisx opens the Redis client every role uses: plain, cluster or
// behind Sentinel, all seen as redis.UniversalClient.
package redisx

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/config"
)

// Options are what differs between the roles' clients.
type Options struct {
	PoolSize int           // overrides config's pool size (per node) when > 0
	Timeout  time.Duration // bounds dial, read and write when > 0
	Name     string        // CLIENT SETNAME, so CLIENT LIST shows who is who
}

// Open returns the client for cfg.
func Open(cfg config.Redis, o Options) (redis.UniversalClient, error) {
	pool := cfg.PoolSize
	if o.PoolSize > 0 {
		pool = o.PoolSize
	}
	tlsCfg, err := cfg.TLSFiles.Client(cfg.TLS, "SECKILL_REDIS_TLS")
	if err != nil {
		return nil, err
	}
	uo := &redis.UniversalOptions{
		Addrs: cfg.Addresses(), Username: cfg.Username, Password: cfg.Password.Value(), DB: cfg.DB,
		MasterName: cfg.MasterName, IsClusterMode: cfg.Cluster,
		SentinelUsername: cfg.SentinelUsername, SentinelPassword: cfg.SentinelPassword.Value(),
		TLSConfig: tlsCfg, PoolSize: pool, ClientName: o.Name,
		// A call's context deadline bounds its network wait (a local
		// activity's StartToClose, a request's): a Redis whose replies are
		// lost fails the call at the deadline, not at the read timeout.
		ContextTimeoutEnabled: true,
	}
	if o.Timeout > 0 {
		uo.DialTimeout, uo.ReadTimeout, uo.WriteTimeout = o.Timeout, o.Timeout, o.Timeout
	}
	return redis.NewUniversalClient(uo), nil
}

// Ping checks that Redis answers (on a cluster: that every master does).
func Ping(ctx context.Context, rdb redis.UniversalClient) error {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() })
		if err != nil {
			return fmt.Errorf("redis cluster: %w", err)
		}
		return nil
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Describe names the client's kind and addresses for logs.
func Describe(cfg config.Redis) string {
	kind := "redis"
	switch {
	case cfg.MasterName != "":
		kind = "redis sentinel (master " + cfg.MasterName + ")"
	case len(cfg.Addresses()) > 1 || cfg.Cluster:
		kind = "redis cluster"
	}
	return kind + " " + strings.Join(cfg.Addresses(), ",")
}

// Listen calls fn with every message's payload until ctx ends (messages
// sent while disconnected are lost).
func Listen(ctx context.Context, rdb redis.UniversalClient, channel string, fn func(payload string)) {
	ps := rdb.Subscribe(ctx, channel)
	defer func() { _ = ps.Close() }()
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			fn(m.Payload)
		}
	}
}
