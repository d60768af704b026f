package queue

import (
	"context"
	"fmt"

	"github.com/apache/rocketmq-client-go/v2/admin"
)

// EnsureTopic creates (or updates) a topic with queues read and write queues
// on the broker at brokerAddr. Creating an existing topic is harmless.
func EnsureTopic(ctx context.Context, nameServers []string, brokerAddr, topic string, queues int) error {
	err := withAdmin(nameServers, func(a admin.Admin) error {
		return a.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(brokerAddr),
			admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
	})
	if err != nil {
		return fmt.Errorf("create topic %s on %s: %w", topic, brokerAddr, err)
	}
	return nil
}

// DeleteTopic removes a topic from the broker at brokerAddr and from the name
// servers (its queues and the consumer offsets on it go with it). Deleting a
// missing topic is harmless.
func DeleteTopic(ctx context.Context, nameServers []string, brokerAddr, topic string) error {
	err := withAdmin(nameServers, func(a admin.Admin) error {
		return a.DeleteTopic(ctx, admin.WithTopicDelete(topic), admin.WithBrokerAddrDelete(brokerAddr),
			admin.WithNameSrvAddr(nameServers))
	})
	if err != nil {
		return fmt.Errorf("delete topic %s on %s: %w", topic, brokerAddr, err)
	}
	return nil
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
