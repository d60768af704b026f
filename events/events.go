// Package events publishes the outbox of the orders' settled changes
// (store.OrderEvent) to RocketMQ: at least once, each order's events in turn
// (docs/events.md).
package events

import (
	"context"
	"errors"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/store"
)

// Sender sends one event (queue.Producer from NewKeyedProducer).
type Sender interface {
	SendEvent(ctx context.Context, topic string, e queue.Encoded) error
}

// Outbox is the events table (store.Store).
type Outbox interface {
	TryLease(ctx context.Context, name string) (*store.Lease, error)
	UnpublishedEvents(ctx context.Context, limit int) ([]store.OrderEvent, error)
	MarkPublished(ctx context.Context, ids []int64) error
}

var _ Outbox = (*store.Store)(nil)

// LeaseName is the database's lock the active publisher holds.
const LeaseName = "seckill-order-events"

// Publisher sends the unpublished events while it holds the lease; other
// workers' publishers stand by.
type Publisher struct {
	out  Outbox
	send Sender
	cfg  config.Events
	m    *Metrics
	log  *slog.Logger
}

func New(out Outbox, send Sender, cfg config.Events, m *Metrics, log *slog.Logger) *Publisher {
	return &Publisher{out: out, send: send, cfg: cfg, m: m, log: log.With("component", "events")}
}

// Run publishes until ctx ends; a send in flight then is sent again later.
func (p *Publisher) Run(ctx context.Context) {
	for ctx.Err() == nil {
		lease, err := p.out.TryLease(ctx, LeaseName)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("order events lease", "err", err)
		}
		if lease != nil {
			p.log.Info("publishing order events", "topic", p.cfg.Topic)
			p.m.leader.Set(1)
			p.lead(ctx, lease)
			lease.Release()
			p.m.leader.Set(0)
			p.m.oldest.Set(0)
		}
		wait(ctx, 10*p.cfg.Poll) // standby
	}
}

func (p *Publisher) lead(ctx context.Context, lease *store.Lease) {
	backoff := p.cfg.Poll
	for ctx.Err() == nil && lease.Held(ctx) {
		n, err := p.Once(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			p.m.failures.Inc()
			p.log.Warn("publish order events", "published", n, "err", err)
			wait(ctx, backoff)
			backoff = min(2*backoff, 5*time.Second)
			continue
		case n < p.cfg.Batch:
			wait(ctx, p.cfg.Poll)
		}
		backoff = p.cfg.Poll
	}
}

// Once publishes up to Batch of the oldest unpublished events and returns
// how many the broker stored; those are marked published.
func (p *Publisher) Once(ctx context.Context) (int, error) {
	evs, err := p.out.UnpublishedEvents(ctx, p.cfg.Batch)
	if err != nil || len(evs) == 0 {
		p.m.oldest.Set(0)
		return 0, err
	}
	p.m.oldest.Set(time.Since(evs[0].CreatedAt).Seconds())
	sent, err := Send(ctx, p.send, p.cfg.Topic, evs, p.cfg.Parallel)
	// Marked even as the worker stops: what was stored is not sent again.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if merr := p.out.MarkPublished(mctx, sent); merr != nil {
		return 0, errors.Join(err, merr) // sent again later: duplicates of the same event ids
	}
	p.m.published.Add(float64(len(sent)))
	return len(sent), err
}

// Send sends evs, up to parallel orders at once, each order's events in the
// order given; after a failed send a lane sends nothing more, so no event
// goes before an earlier one of its order. It returns the ids sent.
func Send(ctx context.Context, s Sender, topic string, evs []store.OrderEvent, parallel int) ([]int64, error) {
	lanes := make([][]store.OrderEvent, parallel)
	for _, e := range evs {
		h := fnv.New32a()
		h.Write([]byte(e.OrderID))
		i := h.Sum32() % uint32(parallel)
		lanes[i] = append(lanes[i], e)
	}
	var (
		mu   sync.Mutex
		sent []int64
		errs []error
		wg   sync.WaitGroup
	)
	for _, lane := range lanes {
		wg.Go(func() {
			for _, e := range lane {
				err := s.SendEvent(ctx, topic, queue.Encoded{OrderID: e.OrderID, Body: []byte(e.Payload), EventID: e.EventID})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					sent = append(sent, e.ID)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return sent, errors.Join(errs...)
}

// History reads the events of a period (store.Store).
type History interface {
	EventsSince(ctx context.Context, since time.Time, afterID int64, limit int) ([]store.OrderEvent, error)
}

// Replay sends again every event created at or after since, published or
// not, in order; it returns how many it sent.
func Replay(ctx context.Context, h History, s Sender, cfg config.Events, since time.Time) (int, error) {
	var after int64
	n := 0
	for {
		evs, err := h.EventsSince(ctx, since, after, cfg.Batch)
		if err != nil || len(evs) == 0 {
			return n, err
		}
		sent, err := Send(ctx, s, cfg.Topic, evs, cfg.Parallel)
		n += len(sent)
		if err != nil {
			return n, err
		}
		after = evs[len(evs)-1].ID
	}
}

func wait(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
