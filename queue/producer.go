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

// Producer sends signed messages; a nil error means the broker stored them.
type Producer struct {
	p        rocketmq.Producer
	topic    string
	signer   *Signer
	degraded func(status string)
}

// OnDegraded calls fn with the status of each send stored without full
// durability (delivered: not resent). Call it before sends start.
func (p *Producer) OnDegraded(fn func(status string)) { p.degraded = fn }

var degradedStatus = map[primitive.SendStatus]string{
	primitive.SendFlushDiskTimeout:  "FLUSH_DISK_TIMEOUT",
	primitive.SendFlushSlaveTimeout: "FLUSH_SLAVE_TIMEOUT",
	primitive.SendSlaveNotAvailable: "SLAVE_NOT_AVAILABLE",
}

func (p *Producer) stored(status primitive.SendStatus) bool {
	if status == primitive.SendOK {
		return true
	}
	name, ok := degradedStatus[status]
	if ok && p.degraded != nil {
		p.degraded(name)
	}
	return ok
}

func NewProducer(cfg config.RocketMQ) (*Producer, error) { return newProducer(cfg) }

// NewKeyedProducer is NewProducer whose messages of one key go to one queue
// of a topic, where they stay in the order they were sent (SendEvent).
func NewKeyedProducer(cfg config.RocketMQ) (*Producer, error) {
	return newProducer(cfg, producer.WithQueueSelector(producer.NewHashQueueSelector()))
}

func newProducer(cfg config.RocketMQ, opts ...producer.Option) (*Producer, error) {
	p, err := rocketmq.NewProducer(append([]producer.Option{
		producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
		producer.WithCredentials(credentials(cfg.AccessKey, cfg.SecretKey)),
		producer.WithGroupName(cfg.ProducerGroup),
		producer.WithInstanceName(instanceName("producer")),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(3 * time.Second),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("new rocketmq producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("start rocketmq producer (name server %v): %w", cfg.NameServers, err)
	}
	return &Producer{p: p, topic: cfg.Topic, signer: NewSigner(cfg)}, nil
}

// Encoded is an order message in its wire form (order.Message.Encode).
type Encoded struct {
	OrderID string
	Body    []byte
	EventID string            // an order event's (SendEvent)
	Props   map[string]string // further message properties (an order event's signature)
}

// EventIDProperty carries an order event's id; a redelivery carries the same.
const EventIDProperty = "event_id"

// PublishOrder sends one order message to the orders topic, keyed by order id.
func (p *Producer) PublishOrder(ctx context.Context, m order.Message) error {
	return p.PublishOrders(ctx, []Encoded{{OrderID: m.OrderID, Body: m.Encode()}})
}

// PublishOrders sends order messages in one request, stored together or not at all.
func (p *Producer) PublishOrders(ctx context.Context, ms []Encoded) error {
	return p.send(ctx, p.topic, ms)
}

// SendEvent sends an order event to topic, keyed and sharded by its order
// id (one queue per order with NewKeyedProducer), its id as EventIDProperty.
func (p *Producer) SendEvent(ctx context.Context, topic string, e Encoded) error {
	return p.send(ctx, topic, []Encoded{e})
}

// Send sends one message to topic.
func (p *Producer) Send(ctx context.Context, topic, key string, body []byte) error {
	return p.send(ctx, topic, []Encoded{{OrderID: key, Body: body}})
}

func (p *Producer) send(ctx context.Context, topic string, ms []Encoded) error {
	if len(ms) == 0 {
		return nil
	}
	msgs := make([]*primitive.Message, len(ms))
	for i, m := range ms {
		msgs[i] = primitive.NewMessage(topic, m.Body)
		msgs[i].WithKeys([]string{m.OrderID})
		for k, v := range m.Props {
			msgs[i].WithProperty(k, v)
		}
		if m.EventID != "" {
			// An order event is the shop's: signed by its publisher's own key
			// (events.Signed), never with the order signing key, which a shop
			// must not hold (it lets a message start a saga).
			msgs[i].WithShardingKey(m.OrderID).WithProperty(EventIDProperty, m.EventID)
			continue
		}
		// Signed at the send, not at the reservation: the outbox is as trusted
		// as the reservation, the buyers' hot path skips the HMAC, and a key
		// rotation never meets an entry signed with a dropped key.
		p.signer.SignMessage(msgs[i])
	}
	res, err := p.p.SendSync(ctx, msgs...)
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err() // the caller's deadline, not the library's wording of it
		}
		return fmt.Errorf("send %d orders (first %s) to %s: %w", len(ms), ms[0].OrderID, topic, err)
	}
	if !p.stored(res.Status) {
		return fmt.Errorf("send %d orders (first %s) to %s: broker answered status %d", len(ms), ms[0].OrderID, topic, res.Status)
	}
	return nil
}

func (p *Producer) Close() error { return p.p.Shutdown() }
