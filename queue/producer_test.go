package queue

import (
	"context"
	"testing"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/order"
)

// fakeProducer answers every send with one status.
type fakeProducer struct {
	rocketmq.Producer
	status primitive.SendStatus
	sends  int
	sent   []*primitive.Message
}

func (f *fakeProducer) SendSync(_ context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	f.sends++
	f.sent = append(f.sent, msgs...)
	return &primitive.SendResult{Status: f.status}, nil
}

var testSigner = NewSigner(config.RocketMQ{OrderSigningKey: config.DevOrderSigningKey})

// Every message the producer sends, one or a batch, carries its body's
// signature: the worker starts no saga for one that does not.
func TestProducerSignsEveryMessage(t *testing.T) {
	f := &fakeProducer{status: primitive.SendOK}
	p := &Producer{p: f, topic: "t", signer: testSigner}
	msgs := []order.Message{{OrderID: "a", ItemID: 1, UserID: 1}, {OrderID: "b", ItemID: 1, UserID: 2}}
	if err := p.PublishOrders(context.Background(), []Encoded{{OrderID: "a", Body: msgs[0].Encode()}, {OrderID: "b", Body: msgs[1].Encode()}}); err != nil {
		t.Fatal(err)
	}
	if err := p.PublishOrder(context.Background(), msgs[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.Send(context.Background(), "dlq", "a", msgs[0].Encode()); err != nil {
		t.Fatal(err)
	}
	if len(f.sent) != 4 {
		t.Fatalf("%d messages sent, want 4", len(f.sent))
	}
	for i, m := range f.sent {
		if err := testSigner.Verify(m); err != nil {
			t.Errorf("message %d: %v", i, err)
		}
	}
}

// FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE are
// answered by a broker that stored the message (only its flush or its slave
// lagged): a send that gets one is done, not retried (a resend is a
// duplicate), and the status is reported. An unknown status stays an error.
func TestStoredStatusesAreStored(t *testing.T) {
	msgs := []order.Message{{OrderID: "a", ItemID: 1, UserID: 1}, {OrderID: "b", ItemID: 1, UserID: 2}}
	encoded := []Encoded{{OrderID: "a", Body: msgs[0].Encode()}, {OrderID: "b", Body: msgs[1].Encode()}}
	for status, name := range map[primitive.SendStatus]string{
		primitive.SendOK:                "",
		primitive.SendFlushDiskTimeout:  "FLUSH_DISK_TIMEOUT",
		primitive.SendFlushSlaveTimeout: "FLUSH_SLAVE_TIMEOUT",
		primitive.SendSlaveNotAvailable: "SLAVE_NOT_AVAILABLE",
	} {
		var seen []string
		p := &Producer{p: &fakeProducer{status: status}, topic: "t", signer: testSigner}
		p.OnDegraded(func(s string) { seen = append(seen, s) })
		if err := p.PublishOrders(context.Background(), encoded); err != nil {
			t.Fatalf("status %d: batch send: %v", status, err)
		}
		if err := p.PublishOrder(context.Background(), msgs[0]); err != nil {
			t.Fatalf("status %d: send: %v", status, err)
		}
		want := 0
		if name != "" {
			want = 2
		}
		if len(seen) != want || (want > 0 && (seen[0] != name || seen[1] != name)) {
			t.Fatalf("status %d: reported %q, want %d x %q", status, seen, want, name)
		}
	}
	p := &Producer{p: &fakeProducer{status: primitive.SendUnknownError}, topic: "t", signer: testSigner}
	if err := p.PublishOrder(context.Background(), msgs[0]); err == nil {
		t.Fatal("an unknown status must stay an error")
	}
}
