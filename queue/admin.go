package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/seckill/seckill/config"
)

// EnsureTopic creates or updates a topic on every broker of cfg.Brokers.
func EnsureTopic(ctx context.Context, cfg config.RocketMQ, topic string, queues int) error {
	return onEveryBroker(ctx, cfg, "create topic "+topic, func(a admin.Admin, b string) error {
		return a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
	})
}

// DeleteTopic removes a topic from every broker and the name servers.
func DeleteTopic(ctx context.Context, cfg config.RocketMQ, topic string) error {
	return onEveryBroker(ctx, cfg, "delete topic "+topic, func(a admin.Admin, b string) error {
		return a.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(b),
			admin.WithNameSrvAddr(cfg.NameServers))
	})
}

// onEveryBroker runs f for each of cfg.Brokers with an admin client.
func onEveryBroker(ctx context.Context, cfg config.RocketMQ, what string, f func(a admin.Admin, broker string) error) error {
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(cfg.NameServers)), admin.WithCredentials(credentials(cfg.AccessKey, cfg.SecretKey)))
	if err != nil {
		return fmt.Errorf("new rocketmq admin: %w", err)
	}
	defer func() { _ = a.Close() }()
	if cfg.AccessKey != "" && len(cfg.Brokers) > 0 {
		// The library's admin signs requests only from its first
		// GetAllSubscriptionGroup on: an ACL broker refuses them before.
		if _, err := a.GetAllSubscriptionGroup(ctx, cfg.Brokers[0], 5*time.Second); err != nil {
			return fmt.Errorf("rocketmq admin on %s: %w", cfg.Brokers[0], err)
		}
	}
	for _, b := range cfg.Brokers {
		if err := f(a, b); err != nil {
			return fmt.Errorf("%s on %s: %w", what, b, err)
		}
	}
	return nil
}
