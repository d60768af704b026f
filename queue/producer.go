package queue

import (
	"context"
	"fmt"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
)

// Producer sends messages with SendSync: a nil error means the broker stored
// the message.
type Producer struct {
	p        rocketmq.Producer
	topic    string
	degraded func(status string)
}

// OnDegraded calls fn (before the send returns nil) with the status of each
// send the broker stored without its full durability: FLUSH_DISK_TIMEOUT
// (a SYNC_FLUSH broker's flush was late), FLUSH_SLAVE_TIMEOUT (a SYNC_MASTER's
// slave was late), SLAVE_NOT_AVAILABLE (it has no slave). The message is in
// the master's commit log and will be delivered; sending it again would only
// make a duplicate. Not safe to call once sends have started.
func (p *Producer) OnDegraded(fn func(status string)) { p.degraded = fn }

// stored reports whether the broker stored the message, and reports a
// degraded store (OnDegraded).
func (p *Producer) stored(status primitive.SendStatus) bool {
	var name string
	switch status {
	case primitive.SendOK:
		return true
	case primitive.SendFlushDiskTimeout:
		name = "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		name = "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		name = "SLAVE_NOT_AVAILABLE"
	default:
		return false
	}
	if p.degraded != nil {
		p.degraded(name)
	}
	return true
}

// NewProducer starts a producer in cfg.ProducerGroup for cfg.Topic.
func NewProducer(cfg config.RocketMQ) (*Producer, error) {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(resolver(cfg.NameServers)),
		producer.WithCredentials(credentials(cfg.AccessKey, cfg.SecretKey)),
		producer.WithGroupName(cfg.ProducerGroup),
		producer.WithInstanceName(instanceName("producer")),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(3*time.Second),
	)
	if err != nil {
		return nil, fmt.Errorf("new rocketmq producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start rocketmq producer (name server %v): %w", cfg.NameServers, err)
	}
	return &Producer{p: p, topic: cfg.Topic}, nil
}

// Encoded is an order message in its wire form (order.Message.Encode), as
// the outbox holds it: the relay sends it without decoding it again.
type Encoded struct {
	OrderID string
	Body    []byte
}

// PublishOrder sends one order message to the orders topic, keyed by order id.
func (p *Producer) PublishOrder(ctx context.Context, m order.Message) error {
	return p.Send(ctx, p.topic, m.OrderID, m.Encode())
}

// PublishOrders sends encoded order messages to the orders topic in one
// batch (one request, stored together or not at all), each keyed by its
// order id.
func (p *Producer) PublishOrders(ctx context.Context, ms []Encoded) error {
	if len(ms) == 0 {
		return nil
	}
	msgs := make([]*primitive.Message, len(ms))
	for i, m := range ms {
		msgs[i] = primitive.NewMessage(p.topic, m.Body)
		msgs[i].WithKeys([]string{m.OrderID})
	}
	return p.send(ctx, fmt.Sprintf("%d orders", len(ms)), msgs...)
}

// Send sends one message and waits until the broker has stored it.
func (p *Producer) Send(ctx context.Context, topic, key string, body []byte) error {
	msg := primitive.NewMessage(topic, body)
	msg.WithKeys([]string{key})
	return p.send(ctx, key, msg)
}

// send sends msgs in one request (a batch when more than one) and waits
// until the broker has stored them.
func (p *Producer) send(ctx context.Context, what string, msgs ...*primitive.Message) error {
	res, err := p.p.SendSync(ctx, msgs...)
	if err != nil {
		return fmt.Errorf("send %s to %s: %w", what, msgs[0].Topic, ctxErr(ctx, err))
	}
	if !p.stored(res.Status) {
		return fmt.Errorf("send %s to %s: broker answered status %d", what, msgs[0].Topic, res.Status)
	}
	return nil
}

// Close shuts the producer down.
func (p *Producer) Close() error { return p.p.Shutdown() }
