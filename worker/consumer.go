package worker

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
)

// Starter starts an order's saga; already started is success (workflows.Client).
type Starter interface {
	Start(ctx context.Context, m order.Message) error
}

// Verifier tells the order messages the API signed from any other (queue.Signer).
type Verifier interface {
	Verify(m *primitive.Message) error
}

// Source is the topic a Handler consumes.
type Source int

const (
	Orders      Source = iota // the orders topic
	DeadLetters               // the order consumer group's dead-letter topic
)

// Dead-letter outcomes (seckill_worker_dead_letter_orders_total's labels).
const (
	DeadLetterStarted = "started" // the saga was started now, or already existed
	DeadLetterInvalid = "invalid" // the body names no order; dropped (logged)
	DeadLetterForged  = "forged"  // not signed by the API; dropped (logged)
)

// Handler starts the saga of each message's order; a failed start returns
// the error, so the message comes back. A forged or undecodable message is
// logged, counted and acknowledged: redelivery could not fix it.
func Handler(src Source, s Starter, v Verifier, m *Metrics, log *slog.Logger, timeout time.Duration) queue.Handler {
	what, started, failed, invalid, forged := "order message", m.SagaStarts, m.StartErrors, m.Invalid, m.Forged.WithLabelValues("orders")
	if src == DeadLetters {
		what, started, failed, invalid = "dead letter", m.DeadLetters.WithLabelValues(DeadLetterStarted), m.DeadLetterEr,
			m.DeadLetters.WithLabelValues(DeadLetterInvalid)
		forged = m.Forged.WithLabelValues("dead_letters")
	}
	return func(ctx context.Context, msg *primitive.MessageExt) error {
		if err := v.Verify(&msg.Message); err != nil {
			forged.Inc()
			if src == DeadLetters {
				m.DeadLetters.WithLabelValues(DeadLetterForged).Inc()
			}
			log.Error("dropping "+what+" not signed by the API: no saga started", "msg_id", msg.MsgId, "topic", msg.Topic,
				"born_host", msg.BornHost, "store_host", msg.StoreHost, "key", msg.GetKeys(), "body", string(msg.Body[:min(len(msg.Body), 512)]), "err", err)
			return nil
		}
		om, err := order.DecodeMessage(msg.Body)
		if err != nil {
			invalid.Inc()
			log.Error("dropping undecodable "+what, "msg_id", msg.MsgId, "body", string(msg.Body), "err", err)
			return nil
		}
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		if err := s.Start(sctx, om); err != nil {
			failed.Inc()
			return fmt.Errorf("%s of order %s: %w", what, om.OrderID, err)
		}
		started.Inc()
		if src == DeadLetters {
			log.Warn("dead-lettered order re-driven: saga started", "order_id", om.OrderID, "item_id", om.ItemID, "user_id", om.UserID)
		}
		return nil
	}
}

// DeadLetterTopic is the broker's dead-letter topic of a consumer group.
func DeadLetterTopic(group string) string { return "%DLQ%" + group }

// deadLetterMaxReconsume: retried every 2 h for days, not moved to a topic nobody reads.
const deadLetterMaxReconsume = 64

// consumerOptions start a new group at the first offset, not after what was sent.
func consumerOptions(cfg config.RocketMQ, group, topic string, maxReconsume int32, goroutines int, log *slog.Logger) queue.ConsumerOptions {
	return queue.ConsumerOptions{NameServers: cfg.NameServers, AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey,
		Group: group, Topic: topic, FromFirstOffset: true, MaxReconsume: maxReconsume, Goroutines: goroutines, Log: log}
}

// StartOrderConsumer subscribes the saga starter to the orders topic.
func StartOrderConsumer(cfg config.RocketMQ, goroutines int, log *slog.Logger, h queue.Handler) (*queue.Consumer, error) {
	return queue.NewConsumer(consumerOptions(cfg, cfg.ConsumerGroup, cfg.Topic, cfg.MaxReconsume, goroutines, log), h)
}

// StartDeadLetterConsumer subscribes h to the dead-letter topic, creating it
// first (the broker's own is write-only, made at the first dead letter).
func StartDeadLetterConsumer(ctx context.Context, cfg config.RocketMQ, group string, log *slog.Logger, h queue.Handler) (*queue.Consumer, error) {
	topic := DeadLetterTopic(cfg.ConsumerGroup)
	// A broker just restarted may time out the first admin requests.
	if err := retry(ctx, 10, 2*time.Second, func() error {
		return queue.EnsureTopic(ctx, cfg, topic, 1)
	}); err != nil {
		return nil, err
	}
	o := consumerOptions(cfg, group, topic, deadLetterMaxReconsume, 4, log)
	var c *queue.Consumer
	// The name server learns of the topic at the broker's next registration.
	err := retry(ctx, 30, time.Second, func() (err error) {
		c, err = queue.NewConsumer(o, h)
		return err
	})
	return c, err // nil unless err is
}

// retry calls f until it succeeds, at most attempts times, pausing after each failure.
func retry(ctx context.Context, attempts int, pause time.Duration, f func() error) error {
	var err error
	for range attempts {
		if err = f(); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
	}
	return err
}
