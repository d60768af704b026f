package provider_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/seckill/seckill/payment/provider"
)

// flaky is a provider whose Refund fails with errs in turn, then succeeds;
// it records the key and the (fake) time of every attempt.
type flaky struct {
	mu    sync.Mutex
	errs  []error
	keys  []string
	times []time.Time
}

func (f *flaky) Create(context.Context, provider.Request) (provider.Payment, error) {
	return provider.Payment{}, nil
}
func (f *flaky) Cancel(_ context.Context, id string) (provider.Payment, error) {
	return provider.Payment{ID: id, Status: provider.Succeeded}, fmt.Errorf("cancel: %w", provider.ErrAlreadySucceeded)
}
func (f *flaky) Lookup(context.Context, string) (provider.Payment, error) {
	return provider.Payment{}, nil
}
func (f *flaky) Record(context.Context, string) (provider.Record, error) {
	return provider.Record{}, nil
}
func (f *flaky) LookupRefund(context.Context, string) (provider.Refund, error) {
	return provider.Refund{}, nil
}
func (f *flaky) Verify([]byte, string) (provider.Event, error) { return provider.Event{}, nil }
func (f *flaky) Refund(_ context.Context, id, key string) (provider.Refund, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys, f.times = append(f.keys, key), append(f.times, time.Now())
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		return provider.Refund{}, err
	}
	return provider.Refund{ID: "re_1", PaymentID: id, Status: provider.RefundSucceeded}, nil
}

// A 429 and a timeout are retried with the same idempotency key, after
// jittered waits that grow, and the call then succeeds.
func TestGuardRetriesRateLimitAndTimeoutWithTheSameKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{errs: []error{provider.ErrRateLimited, fmt.Errorf("timeout: %w", provider.ErrUnavailable), provider.ErrUnavailable}}
		g := provider.Guard(f, provider.Limits{RPS: 1000, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second})
		r, err := g.Refund(context.Background(), "pi_1", "refund-order-1")
		if err != nil || r.ID != "re_1" {
			t.Fatalf("refund: %+v, %v", r, err)
		}
		if len(f.keys) != 4 {
			t.Fatalf("%d attempts, want 4", len(f.keys))
		}
		for _, k := range f.keys {
			if k != "refund-order-1" {
				t.Errorf("attempt with key %q", k)
			}
		}
		// Retry n waits within [d/2, d], d = 100ms·2ⁿ⁻¹.
		for n := 1; n < len(f.times); n++ {
			d := 100 * time.Millisecond << (n - 1)
			if w := f.times[n].Sub(f.times[n-1]); w < d/2 || w > d {
				t.Errorf("wait before retry %d: %s, want within [%s, %s]", n, w, d/2, d)
			}
		}
	})
}

// A permanent error is not retried, and a value that comes with it (the
// payment that won over a cancel) is kept.
func TestGuardDoesNotRetryPermanentErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{errs: []error{errors.New("card declined")}}
		g := provider.Guard(f, provider.Limits{})
		if _, err := g.Refund(context.Background(), "pi_1", "k"); err == nil || len(f.keys) != 1 {
			t.Fatalf("refund: %v after %d attempts, want the error after 1", err, len(f.keys))
		}
		p, err := g.Cancel(context.Background(), "pi_2")
		if !errors.Is(err, provider.ErrAlreadySucceeded) || p.Status != provider.Succeeded {
			t.Fatalf("cancel: %+v, %v", p, err)
		}
	})
}

// The attempts are bounded: the last error is returned, still typed.
func TestGuardGivesUpAfterItsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{errs: []error{provider.ErrUnavailable, provider.ErrUnavailable, provider.ErrUnavailable, provider.ErrUnavailable}}
		g := provider.Guard(f, provider.Limits{Attempts: 3})
		_, err := g.Refund(context.Background(), "pi_1", "k")
		if !errors.Is(err, provider.ErrUnavailable) || len(f.keys) != 3 {
			t.Fatalf("%v after %d attempts, want ErrUnavailable after 3", err, len(f.keys))
		}
	})
}

// A context that ends during a backoff ends the call at once.
func TestGuardHonoursTheContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{errs: []error{provider.ErrRateLimited, provider.ErrRateLimited}}
		g := provider.Guard(f, provider.Limits{BaseDelay: time.Minute, MaxDelay: time.Minute})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := g.Refund(ctx, "pi_1", "k")
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, provider.ErrRateLimited) {
			t.Fatalf("err %v: want the deadline and the last error", err)
		}
		if took := time.Since(start); took != 5*time.Second || len(f.keys) != 1 {
			t.Fatalf("returned after %s and %d attempts, want 5s and 1", took, len(f.keys))
		}
	})
}

// Every call, retries included, waits for the one limiter: 10 calls at 5
// per second (burst 1) are spread over 1.8 s.
func TestGuardLimitsTheRateAcrossCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &flaky{}
		g := provider.Guard(f, provider.Limits{RPS: 5})
		start := time.Now()
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Go(func() {
				if _, err := g.Refund(context.Background(), "pi", fmt.Sprint(i)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if took := time.Since(start); took < 1800*time.Millisecond || took > 2*time.Second {
			t.Fatalf("10 calls at 5/s took %s, want 1.8s", took)
		}
	})
}
