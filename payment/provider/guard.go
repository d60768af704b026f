package provider

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/time/rate"
)

// Limits bound and retry a provider's outgoing calls (Guard). The zero value
// of each field takes its default.
type Limits struct {
	// RPS is the calls per second to the provider, retries included, across
	// the process: Stripe allows about 100 operations per second per
	// account, so the default, 80, leaves room for the dashboard and others.
	RPS   float64
	Burst int // default 1: calls are spread, not bunched
	// Attempts bounds the tries of one call (default 6). Only ErrRateLimited
	// and ErrUnavailable are retried, with the same idempotency key.
	Attempts int
	// The wait before retry n (1, 2, …) is drawn from [d/2, d], with
	// d = BaseDelay·2ⁿ⁻¹ capped at MaxDelay (defaults 200ms and 10s):
	// jittered, so clients turned away together do not come back together.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

// DefaultRPS is Limits.RPS's default.
const DefaultRPS = 80

func (l Limits) withDefaults() Limits {
	if l.RPS <= 0 {
		l.RPS = DefaultRPS
	}
	if l.Burst <= 0 {
		l.Burst = 1
	}
	if l.Attempts <= 0 {
		l.Attempts = 6
	}
	if l.BaseDelay <= 0 {
		l.BaseDelay = 200 * time.Millisecond
	}
	if l.MaxDelay <= 0 {
		l.MaxDelay = 10 * time.Second
	}
	return l
}

// Guard returns p with every outgoing call (Create, Cancel, Refund, Lookup)
// behind one limiter and retried on ErrRateLimited and ErrUnavailable. A
// retry repeats the call as it was, so it carries the same idempotency key
// (the order id, the refund key): a call that happened but whose answer was
// lost is not made twice. Verify calls no one and passes through.
func Guard(p Provider, l Limits) Provider {
	l = l.withDefaults()
	return &guarded{p: p, l: l, lim: rate.NewLimiter(rate.Limit(l.RPS), l.Burst)}
}

type guarded struct {
	p   Provider
	l   Limits
	lim *rate.Limiter
}

var _ Provider = (*guarded)(nil)

// Retryable reports whether err is worth another try of the same call.
func Retryable(err error) bool {
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable)
}

// call runs fn until it succeeds, fails for good, runs out of attempts or
// ctx ends; each try waits for the limiter first.
func call[T any](ctx context.Context, g *guarded, op string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	var last error
	for n := 0; n < g.l.Attempts; n++ {
		if n > 0 {
			d := min(g.l.BaseDelay<<(n-1), g.l.MaxDelay)
			d = d/2 + rand.N(d/2+1)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return zero, fmt.Errorf("%s: %w (after %d attempts: %w)", op, ctx.Err(), n, last)
			case <-t.C:
			}
		}
		if err := g.lim.Wait(ctx); err != nil {
			if last == nil {
				return zero, fmt.Errorf("%s: waiting for the rate limiter: %w", op, err)
			}
			return zero, fmt.Errorf("%s: waiting for the rate limiter: %w (after %d attempts: %w)", op, err, n, last)
		}
		v, err := fn(ctx)
		if err == nil || !Retryable(err) {
			return v, err
		}
		last = err
	}
	return zero, fmt.Errorf("%s: gave up after %d attempts: %w", op, g.l.Attempts, last)
}

func (g *guarded) Create(ctx context.Context, r Request) (Payment, error) {
	return call(ctx, g, "create payment", func(ctx context.Context) (Payment, error) { return g.p.Create(ctx, r) })
}

func (g *guarded) Cancel(ctx context.Context, id string) (Payment, error) {
	return call(ctx, g, "cancel payment", func(ctx context.Context) (Payment, error) { return g.p.Cancel(ctx, id) })
}

func (g *guarded) Refund(ctx context.Context, id, key string) (Refund, error) {
	return call(ctx, g, "refund payment", func(ctx context.Context) (Refund, error) { return g.p.Refund(ctx, id, key) })
}

func (g *guarded) Lookup(ctx context.Context, id string) (Payment, error) {
	return call(ctx, g, "look up payment", func(ctx context.Context) (Payment, error) { return g.p.Lookup(ctx, id) })
}

func (g *guarded) LookupRefund(ctx context.Context, id string) (Refund, error) {
	return call(ctx, g, "look up refund", func(ctx context.Context) (Refund, error) { return g.p.LookupRefund(ctx, id) })
}

func (g *guarded) Record(ctx context.Context, id string) (Record, error) {
	return call(ctx, g, "read the record of payment", func(ctx context.Context) (Record, error) { return g.p.Record(ctx, id) })
}

func (g *guarded) Verify(payload []byte, signature string) (Event, error) {
	return g.p.Verify(payload, signature)
}
