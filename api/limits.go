package api

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// retryAfter is how long until lim has a token again.
func retryAfter(lim *rate.Limiter, now time.Time) time.Duration {
	r := float64(lim.Limit())
	if r <= 0 {
		return time.Second
	}
	need := 1 - lim.TokensAt(now)
	if need <= 0 {
		return time.Second
	}
	d := time.Duration(math.Ceil(need / r * float64(time.Second)))
	if d < time.Second {
		d = time.Second
	}
	return d
}

// keyedLimiters holds one token bucket per key (a buyer or a client IP), in
// shards so buyers rarely contend on one mutex. Memory is bounded: limiters
// idle for ttl are evicted by sweep, and a full shard evicts one entry.
type keyedLimiters[K comparable] struct {
	limit    rate.Limit
	burst    int
	ttl      time.Duration
	perShard int
	seed     maphash.Seed
	shards   [64]limiterShard[K]
}

type limiterShard[K comparable] struct {
	mu sync.Mutex
	m  map[K]*limiterEntry
}

type limiterEntry struct {
	lim  *rate.Limiter
	last time.Time // guarded by the shard's mutex
}

func newKeyedLimiters[K comparable](rps float64, burst int, ttl time.Duration, maxKeys int) *keyedLimiters[K] {
	k := &keyedLimiters[K]{limit: rate.Limit(rps), burst: burst, ttl: ttl, seed: maphash.MakeSeed()}
	k.perShard = max(maxKeys/len(k.shards), 1)
	for i := range k.shards {
		k.shards[i].m = make(map[K]*limiterEntry)
	}
	return k
}

// allow takes a token for key; when there is none it says how long to wait.
func (k *keyedLimiters[K]) allow(key K, now time.Time) (bool, time.Duration) {
	sh := &k.shards[maphash.Comparable(k.seed, key)%uint64(len(k.shards))]
	sh.mu.Lock()
	e, ok := sh.m[key]
	if !ok {
		if len(sh.m) >= k.perShard {
			for victim := range sh.m { // map order is random enough to pick a victim
				delete(sh.m, victim)
				break
			}
		}
		e = &limiterEntry{lim: rate.NewLimiter(k.limit, k.burst)}
		sh.m[key] = e
	}
	e.last = now
	sh.mu.Unlock()
	if e.lim.AllowN(now, 1) {
		return true, 0
	}
	return false, retryAfter(e.lim, now)
}

// sweep evicts limiters idle for longer than ttl; it returns how many are left.
func (k *keyedLimiters[K]) sweep(now time.Time) int {
	left := 0
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for key, e := range sh.m {
			if now.Sub(e.last) > k.ttl {
				delete(sh.m, key)
			}
		}
		left += len(sh.m)
		sh.mu.Unlock()
	}
	return left
}
