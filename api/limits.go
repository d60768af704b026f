package api

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// retryAfter is how long until lim has a token again, at least a second.
func retryAfter(lim *rate.Limiter, now time.Time) time.Duration {
	return retryIn(lim.TokensAt(now), float64(lim.Limit()))
}

// retryIn is how long until a bucket refilled at perSecond has a whole token.
func retryIn(tokens, perSecond float64) time.Duration {
	need := 1 - tokens
	if perSecond <= 0 || need <= 0 {
		return time.Second
	}
	return max(time.Duration(math.Ceil(need/perSecond*float64(time.Second))), time.Second)
}

// keyedLimiters holds one token bucket per key, in shards so buyers rarely
// contend. Memory is bounded: sweep evicts buckets idle for ttl, and a full
// shard evicts one entry.
type keyedLimiters[K comparable] struct {
	perSecond float64
	burst     float64
	ttl       time.Duration
	perShard  int
	seed      maphash.Seed
	epoch     time.Time // buckets count time from here (monotonic)
	shards    [64]limiterShard[K]
}

type limiterShard[K comparable] struct {
	mu sync.Mutex
	m  map[K]bucket
}

// bucket is one key's token bucket, by value: no allocation per buyer.
type bucket struct {
	tokens float64
	at     time.Duration // since epoch: when tokens was counted, and the key last seen
}

func newKeyedLimiters[K comparable](rps float64, burst int, ttl time.Duration, maxKeys int) *keyedLimiters[K] {
	k := &keyedLimiters[K]{perSecond: rps, burst: float64(burst), ttl: ttl, seed: maphash.MakeSeed(), epoch: time.Now()}
	k.perShard = max(maxKeys/len(k.shards), 1)
	for i := range k.shards {
		k.shards[i].m = make(map[K]bucket)
	}
	return k
}

// allow takes a token for key, or says how long to wait for one.
func (k *keyedLimiters[K]) allow(key K, now time.Time) (bool, time.Duration) {
	at := now.Sub(k.epoch)
	sh := &k.shards[maphash.Comparable(k.seed, key)%uint64(len(k.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b, ok := sh.m[key]
	if !ok {
		if len(sh.m) >= k.perShard {
			for victim := range sh.m { // map order is random enough to pick a victim
				delete(sh.m, victim)
				break
			}
		}
		b = bucket{tokens: k.burst, at: at}
	}
	// Refilled up to now, capped at the burst; a now older than at (taken
	// before the lock) refills nothing.
	b.tokens = min(b.tokens+max(at-b.at, 0).Seconds()*k.perSecond, k.burst)
	b.at = max(at, b.at)
	if b.tokens >= 1 {
		b.tokens--
		sh.m[key] = b
		return true, 0
	}
	sh.m[key] = b
	return false, retryIn(b.tokens, k.perSecond)
}

// sweep evicts limiters idle for longer than ttl.
func (k *keyedLimiters[K]) sweep(now time.Time) {
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for key, b := range sh.m {
			if now.Sub(k.epoch)-b.at > k.ttl {
				delete(sh.m, key)
			}
		}
		sh.mu.Unlock()
	}
}
