package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/seckill/seckill/config"
)

// Handler processes one message: an error asks for a redelivery (after
// MaxReconsume, to the dead-letter topic).
type Handler func(ctx context.Context, m *primitive.MessageExt) error

// ConsumerOptions configure a push consumer; all but FromFirstOffset are required.
type ConsumerOptions struct {
	NameServers     []string
	AccessKey       string
	SecretKey       config.Secret
	Group           string
	Topic           string
	MaxReconsume    int32
	Goroutines      int
	FromFirstOffset bool
	Log             *slog.Logger // a warning per message handed back for redelivery
}

type Consumer struct {
	c       rocketmq.PushConsumer
	started time.Time
}

// settleAfterStart is how long Close lets a just-started consumer live: an
// early Shutdown races Start's rebalance goroutine (in rocketmq-client-go).
const settleAfterStart = time.Second

// pullBatch: fewer, fuller pulls (the broker answers at most 256 here).
const pullBatch = 256

// NewConsumer subscribes h to opts.Topic, which must exist, and starts consuming.
func NewConsumer(opts ConsumerOptions, h Handler) (*Consumer, error) {
	if opts.MaxReconsume <= 0 || opts.Goroutines <= 0 || opts.Log == nil {
		return nil, fmt.Errorf("consumer %s: MaxReconsume, Goroutines and Log are required", opts.Group)
	}
	o := []consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(opts.NameServers)),
		consumer.WithCredentials(credentials(opts.AccessKey, opts.SecretKey)),
		consumer.WithGroupName(opts.Group),
		consumer.WithInstance(instanceName("consumer")),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeMessageBatchMaxSize(1),
		consumer.WithPullBatchSize(pullBatch),
		consumer.WithMaxReconsumeTimes(opts.MaxReconsume),
		consumer.WithConsumeGoroutineNums(opts.Goroutines),
	}
	if opts.FromFirstOffset {
		o = append(o, consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	}
	c, err := rocketmq.NewPushConsumer(o...)
	if err != nil {
		return nil, fmt.Errorf("new rocketmq consumer: %w", err)
	}
	err = c.Subscribe(opts.Topic, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if err := h(ctx, m); err != nil {
				opts.Log.Warn("message will be redelivered", "topic", m.Topic, "key", m.GetKeys(),
					"reconsume_times", m.ReconsumeTimes, "err", err)
				return consumer.ConsumeRetryLater, nil
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", opts.Topic, err)
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start consumer %s on %s: %w", opts.Group, opts.Topic, err)
	}
	return &Consumer{c: c, started: time.Now()}, nil
}

func (c *Consumer) Close() error {
	time.Sleep(time.Until(c.started.Add(settleAfterStart)))
	return c.c.Shutdown()
}
