package store

import (
	"context"
	"fmt"
	"hash/fnv"
	"time"
)

// Batcher is the Store with payment events group-committed: the events
// waiting in a lane when its last transaction ends are decided together in
// one (ApplyPaymentEvents), and each caller is answered once that commits.
// A payment's events, duplicates included, always take the same lane, so
// two lanes never race for one payment's rows. A batch that fails is
// applied again one event at a time, so one failing decision fails no
// other. Idempotent as ApplyPaymentEvent: by the event id's unique key.
type Batcher struct {
	*Store
	lanes []chan batchReq
	max   int
	done  chan struct{}
}

type batchReq struct {
	ctx context.Context
	e   PaymentEvent
	out chan batchAnswer
}

type batchAnswer struct {
	r   EventResult
	err error
}

// batchTimeout bounds a batch's transaction (its callers' contexts are
// many; one ending must not undo the others' decisions).
const batchTimeout = 10 * time.Second

// NewBatcher starts lanes lanes of batches of up to size events over s;
// Close stops them.
func NewBatcher(s *Store, lanes, size int) *Batcher {
	b := &Batcher{Store: s, max: max(size, 1), done: make(chan struct{})}
	for range max(lanes, 1) {
		lane := make(chan batchReq)
		b.lanes = append(b.lanes, lane)
		go b.run(lane)
	}
	return b
}

// Close stops the lanes once their batches in flight are answered; later
// events are applied one by one.
func (b *Batcher) Close() { close(b.done) }

// ApplyPaymentEvent is Store.ApplyPaymentEvent, group-committed with the
// events of its lane. When ctx ends first, whether the decision committed
// is not known (the provider resends: a repeat).
func (b *Batcher) ApplyPaymentEvent(ctx context.Context, e PaymentEvent) (EventResult, error) {
	h := fnv.New32a()
	_, _ = h.Write([]byte(e.PaymentID))
	req := batchReq{ctx: ctx, e: e, out: make(chan batchAnswer, 1)}
	select {
	case b.lanes[h.Sum32()%uint32(len(b.lanes))] <- req:
	case <-b.done:
		return b.Store.ApplyPaymentEvent(ctx, e)
	case <-ctx.Done():
		return EventResult{}, fmt.Errorf("apply payment event %s: %w", e.ID, ctx.Err())
	}
	select {
	case a := <-req.out:
		return a.r, a.err
	case <-ctx.Done():
		return EventResult{}, fmt.Errorf("apply payment event %s: %w", e.ID, ctx.Err())
	}
}

// run commits lane's events: the first waits, the rest are whoever queued
// meanwhile (no timer: a lone event goes at once).
func (b *Batcher) run(lane chan batchReq) {
	for {
		var batch []batchReq
		select {
		case <-b.done:
			return
		case r := <-lane:
			batch = append(batch, r)
		}
	fill:
		for len(batch) < b.max {
			select {
			case r := <-lane:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		b.commit(batch)
	}
}

func (b *Batcher) commit(batch []batchReq) {
	if len(batch) > 1 {
		es := make([]PaymentEvent, len(batch))
		for i, r := range batch {
			es[i] = r.e
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		rs, err := b.Store.ApplyPaymentEvents(ctx, es)
		cancel()
		if err == nil {
			for i, r := range batch {
				r.out <- batchAnswer{r: rs[i]}
			}
			return
		}
	}
	for _, r := range batch {
		res, err := b.Store.ApplyPaymentEvent(r.ctx, r.e)
		r.out <- batchAnswer{res, err}
	}
}
