// Package redisx opens the Redis client every role uses, from config: a plain
// client for one address, a cluster client for a Redis Cluster's seed nodes,
// a failover client behind Sentinel. The rest of the code sees
// redis.UniversalClient and works on each (keys of one item share a hash
// tag; nothing spans slots in one script or transaction).
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
	// PoolSize overrides config's pool size (per node on a cluster) when > 0.
	PoolSize int
	// Timeout bounds dial, read and write when > 0 (config.APIRedisTimeout);
	// 0 keeps go-redis's defaults.
	Timeout time.Duration
	// Name is sent with CLIENT SETNAME, so CLIENT LIST shows who is who.
	Name string
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

// Listen calls fn with the payload of every message on channel until ctx
// ends. go-redis subscribes again after a reconnect; messages published
// while disconnected are lost, so listeners pair this with a periodic
// re-read. On a cluster a PUBLISH reaches every node's subscribers.
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
