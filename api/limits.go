package api

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// retryAfter is how long until lim has a token again, at least a second.
func retryAfter(lim *rate.Limiter, now time.Time) time.Duration {
	need := 1 - lim.TokensAt(now)
	if lim.Limit() <= 0 || need <= 0 {
		return time.Second
	}
	return max(time.Duration(math.Ceil(need/float64(lim.Limit())*float64(time.Second))), time.Second)
}

// keyedLimiters holds one token bucket per key (a buyer or a client IP), in
// shards so buyers rarely contend on one mutex. Memory is bounded: sweep
// evicts limiters idle for ttl, and a full shard evicts one entry.
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

// allow takes a token for key, or says how long to wait for one.
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

// sweep evicts limiters idle for longer than ttl.
func (k *keyedLimiters[K]) sweep(now time.Time) {
	for i := range k.shards {
		sh := &k.shards[i]
		sh.mu.Lock()
		for key, e := range sh.m {
			if now.Sub(e.last) > k.ttl {
				delete(sh.m, key)
			}
		}
		sh.mu.Unlock()
	}
}

// unsureBuyers remembers the buyers this instance answered "outcome unknown"
// (ErrOutcomeUnknown): their reservation may have taken a unit, so their next
// attempt goes to Redis (409 with the order if it did) even when the item
// looks sold out here. Entries expire after ttl; past max entries new ones
// are dropped (those buyers meet the sold-out flag like anyone else).
type unsureBuyers struct {
	size atomic.Int64 // len(m), read without the lock
	mu   sync.Mutex
	m    map[[2]int64]time.Time
	ttl  time.Duration
	max  int
}

func newUnsureBuyers(ttl time.Duration, maxEntries int) *unsureBuyers {
	return &unsureBuyers{m: map[[2]int64]time.Time{}, ttl: ttl, max: maxEntries}
}

func (u *unsureBuyers) add(itemID, userID int64, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) >= u.max {
		for k, at := range u.m {
			if now.Sub(at) > u.ttl {
				delete(u.m, k)
			}
		}
		u.size.Store(int64(len(u.m)))
		if len(u.m) >= u.max {
			return
		}
	}
	u.m[[2]int64{itemID, userID}] = now
	u.size.Store(int64(len(u.m)))
}

// has reports whether the buyer is unsure within ttl. An empty set, the
// common case, takes no lock: the sold-out answers of a stampede pass here.
func (u *unsureBuyers) has(itemID, userID int64, now time.Time) bool {
	if u.size.Load() == 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.m[[2]int64{itemID, userID}]
	return ok && now.Sub(at) <= u.ttl
}

// forget drops the buyer once Redis answered for it.
func (u *unsureBuyers) forget(itemID, userID int64) {
	if u.size.Load() == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, [2]int64{itemID, userID})
	u.size.Store(int64(len(u.m)))
}
