package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"go.temporal.io/api/serviceerror"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/worker"
	"github.com/seckill/seckill/workflows"
)

// recordingStarter records the orders whose saga it was asked to start.
type recordingStarter struct {
	mu     sync.Mutex
	orders []string
}

func (r *recordingStarter) Start(_ context.Context, m order.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.orders = append(r.orders, m.OrderID)
	return nil
}

// signedMessage is a delivery of body carrying signature sig ("" for none).
func signedMessage(body []byte, sig string) *primitive.MessageExt {
	m := &primitive.MessageExt{Message: primitive.Message{Topic: "t", Body: body}, MsgId: "m"}
	if sig != "" {
		m.WithProperty(queue.SignatureProperty, sig)
	}
	return m
}

// Both handlers start a saga only for a message the API signed: an
// unsigned one, one signed with another key and one whose body was changed
// after signing are acknowledged (redelivery cannot make them genuine),
// counted and never started.
func TestHandlerStartsOnlySignedMessages(t *testing.T) {
	signer := queue.NewSigner(config.RocketMQ{OrderSigningKey: config.Secret(strings.Repeat("k", 32))})
	forger := queue.NewSigner(config.RocketMQ{OrderSigningKey: config.Secret(strings.Repeat("f", 32))})
	genuine := order.Message{OrderID: order.NewID(), ItemID: 7, UserID: 1001, ReservedAt: time.Now().UTC()}
	altered := genuine
	altered.UserID = 666
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, src := range []worker.Source{worker.Orders, worker.DeadLetters} {
		s, m := &recordingStarter{}, worker.NewMetrics(nil)
		h := worker.Handler(src, s, signer, m, log, time.Second)
		for name, msg := range map[string]*primitive.MessageExt{
			"unsigned":     signedMessage(genuine.Encode(), ""),
			"another key":  signedMessage(genuine.Encode(), forger.Sign(genuine.Encode())),
			"altered body": signedMessage(altered.Encode(), signer.Sign(genuine.Encode())),
		} {
			if err := h(context.Background(), msg); err != nil {
				t.Errorf("source %d, %s: %v, want acknowledged", src, name, err)
			}
		}
		if len(s.orders) != 0 {
			t.Fatalf("source %d: sagas started for forged messages: %v", src, s.orders)
		}
		if err := h(context.Background(), signedMessage(genuine.Encode(), signer.Sign(genuine.Encode()))); err != nil {
			t.Fatal(err)
		}
		if len(s.orders) != 1 || s.orders[0] != genuine.OrderID {
			t.Fatalf("source %d: started %v, want the genuine order only", src, s.orders)
		}
		label, started := "orders", m.SagaStarts
		if src == worker.DeadLetters {
			label, started = "dead_letters", m.DeadLetters.WithLabelValues(worker.DeadLetterStarted)
			if n := counter(m.DeadLetters.WithLabelValues(worker.DeadLetterForged)); n != 3 {
				t.Errorf("dead letters forged %v, want 3", n)
			}
		}
		if n := counter(m.Forged.WithLabelValues(label)); n != 3 {
			t.Errorf("source %d: forged %v, want 3", src, n)
		}
		if n := counter(started); n != 1 {
			t.Errorf("source %d: started %v, want 1", src, n)
		}
	}
}

// rawProducer is a client of the broker that is not the API: what anyone
// who reaches the broker can run (its ACL is off by default).
func rawProducer(t *testing.T, cfg config.RocketMQ) rocketmq.Producer {
	t.Helper()
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.NameServers)),
		producer.WithGroupName(testkit.Name(t, "forger")), producer.WithInstanceName(testkit.Name(t, "forger")),
		producer.WithRetry(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown() })
	return p
}

// On the real broker: forged order messages (unsigned, signed with another
// key, a genuine reservation's message altered on the way) on the orders
// topic, and an unsigned one on the dead-letter topic, start no saga and
// write no order row or deduction, and are counted; the genuine order sent
// among them becomes an order as always.
func TestForgedOrderMessagesStartNoSaga(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, pipelineOptions{deadLetters: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	it := p.item(5, 15*time.Minute)
	forger := queue.NewSigner(config.RocketMQ{OrderSigningKey: config.Secret(strings.Repeat("f", 32))})
	// A reservation the API made, whose signed message is changed on the way
	// to another buyer's.
	reserved, err := p.reserve(it.ID, 1201)
	if err != nil {
		t.Fatal(err)
	}
	altered := reserved
	altered.OrderID, altered.UserID = order.NewID(), 1299
	never := func(user int64) order.Message { // a unit nobody reserved
		return order.Message{OrderID: order.NewID(), ItemID: it.ID, UserID: user, ReservedAt: time.Now().UTC()}
	}
	unsigned, otherKey, deadLetter := never(1202), never(1203), never(1204)
	raw := rawProducer(t, p.cfg.RocketMQ)
	send := func(topic string, m order.Message, sig string) {
		t.Helper()
		msg := primitive.NewMessage(topic, m.Encode())
		msg.WithKeys([]string{m.OrderID})
		if sig != "" {
			msg.WithProperty(queue.SignatureProperty, sig)
		}
		if _, err := raw.SendSync(ctx, msg); err != nil {
			t.Fatalf("send %s to %s: %v", m.OrderID, topic, err)
		}
	}
	send(p.cfg.RocketMQ.Topic, unsigned, "")
	send(p.cfg.RocketMQ.Topic, otherKey, forger.Sign(otherKey.Encode()))
	send(p.cfg.RocketMQ.Topic, altered, p.signer.Sign(reserved.Encode()))
	send(worker.DeadLetterTopic(p.cfg.RocketMQ.ConsumerGroup), deadLetter, "")
	genuine := p.buy(it.ID, 1205) // through the API's producer: signed

	p.waitStatus(genuine.OrderID, order.StatusPendingPayment, 30*time.Second)
	fromOrders, fromDeadLetters := p.metrics.Forged.WithLabelValues("orders"), p.metrics.Forged.WithLabelValues("dead_letters")
	deadline := time.Now().Add(45 * time.Second)
	for (counter(fromOrders) < 3 || counter(fromDeadLetters) < 1) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if o, d := counter(fromOrders), counter(fromDeadLetters); o != 3 || d != 1 {
		t.Errorf("forged messages counted: %v on the orders topic, %v on the dead-letter topic; want 3 and 1", o, d)
	}
	for _, m := range []order.Message{unsigned, otherKey, altered, deadLetter} {
		if _, err := p.tc.DescribeWorkflow(ctx, workflows.WorkflowID(m.OrderID), ""); !isNotFound(err) {
			t.Errorf("order %s (user %d): saga described with err %v, want none started", m.OrderID, m.UserID, err)
		}
		if _, err := p.st.FindOrder(ctx, m.OrderID); err == nil {
			t.Errorf("order %s (user %d): an order row was written", m.OrderID, m.UserID)
		}
	}
	var rows []store.Order
	if err := p.st.DB().Where("item_id = ?", it.ID).Find(&rows).Error; err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].OrderID != genuine.OrderID {
		t.Fatalf("order rows %+v, want the genuine order's only", rows)
	}
	p.wantStock(it.ID, 4) // the genuine order's unit only
	if n := counter(p.metrics.SagaStarts); n != 1 {
		t.Fatalf("saga starts %v, want 1 (the genuine order)", n)
	}
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}
