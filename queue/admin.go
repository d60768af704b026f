package queue

import (
	"context"
	"fmt"

	"github.com/apache/rocketmq-client-go/v2/admin"
)

// EnsureTopic creates (or updates) a topic with queues read and write queues
// on every broker of brokerAddrs. Creating an existing topic is harmless.
func EnsureTopic(ctx context.Context, nameServers, brokerAddrs []string, topic string, queues int) error {
	return withAdmin(nameServers, func(a admin.Admin) error {
		for _, b := range brokerAddrs {
			err := a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
				admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
			if err != nil {
				return fmt.Errorf("create topic %s on %s: %w", topic, b, err)
			}
		}
		return nil
	})
}

// DeleteTopic removes a topic from every broker of brokerAddrs and from the name
// servers (its queues and the consumer offsets on it go with it). Deleting a
// missing topic is harmless.
func DeleteTopic(ctx context.Context, nameServers, brokerAddrs []string, topic string) error {
	return withAdmin(nameServers, func(a admin.Admin) error {
		for _, b := range brokerAddrs {
			err := a.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(b),
				admin.WithNameSrvAddr(nameServers))
			if err != nil {
				return fmt.Errorf("delete topic %s on %s: %w", topic, b, err)
			}
		}
		return nil
	})
}

// withAdmin runs f with an admin client on the name servers, closed after.
func withAdmin(nameServers []string, f func(admin.Admin) error) error {
	a, err := admin.NewAdmin(admin.WithResolver(resolver(nameServers)))
	if err != nil {
		return fmt.Errorf("new rocketmq admin: %w", err)
	}
	defer func() { _ = a.Close() }()
	return f(a)
}
