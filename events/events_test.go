package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
)

// fakeSender records what it is sent and refuses the event ids of fail.
type fakeSender struct {
	mu   sync.Mutex
	fail map[string]bool
	got  []queue.Encoded
}

func (f *fakeSender) SendEvent(_ context.Context, _ string, e queue.Encoded) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail[e.EventID] {
		return errors.New("broker down")
	}
	f.got = append(f.got, e)
	return nil
}

// Each order's events are sent in their order; a failed send stops its
// order's later events (they wait for the next round), not other orders'
// lanes, and only what was sent is reported sent.
func TestSendKeepsEachOrdersTurn(t *testing.T) {
	var evs []store.OrderEvent
	for seq := 1; seq <= 3; seq++ {
		for o := range 10 {
			id := fmt.Sprintf("O%d:%d", o, seq)
			evs = append(evs, store.OrderEvent{ID: int64(len(evs) + 1), EventID: id, OrderID: fmt.Sprintf("O%d", o), Seq: seq})
		}
	}
	f := &fakeSender{fail: map[string]bool{"O3:2": true}}
	sent, err := events.Send(context.Background(), f, "t", evs, 4)
	if err == nil {
		t.Fatal("a failed send must be reported")
	}
	last := map[string]int{}
	for _, e := range f.got {
		var o string
		var seq int
		if _, err := fmt.Sscanf(e.EventID, "%2s:%d", &o, &seq); err != nil {
			t.Fatal(err)
		}
		if seq != last[e.OrderID]+1 || o != e.OrderID {
			t.Fatalf("order %s: event %s after seq %d", e.OrderID, e.EventID, last[e.OrderID])
		}
		last[e.OrderID] = seq
	}
	if last["O3"] != 1 {
		t.Fatalf("order O3 sent up to %d, want 1 (its second failed)", last["O3"])
	}
	if len(sent) != len(f.got) || len(sent) < 10 {
		t.Fatalf("%d reported sent, %d sent", len(sent), len(f.got))
	}
	for _, e := range evs {
		if slices.Contains(sent, e.ID) != slices.ContainsFunc(f.got, func(g queue.Encoded) bool { return g.EventID == e.EventID }) {
			t.Fatalf("event %s: reported and sent differ", e.EventID)
		}
	}
}
