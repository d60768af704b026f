package purchase

import (
	"sync"
	"sync/atomic"
	"time"
)

// unsureBuyers remembers the buyers answered "outcome unknown": their next
// attempt goes to Redis even when the item looks sold out here. Entries
// expire after ttl; past max entries new ones are dropped.
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

// has reports whether the buyer is unsure within ttl. An empty set (the
// stampede's sold-out answers) takes no lock.
func (u *unsureBuyers) has(itemID, userID int64, now time.Time) bool {
	if u.size.Load() == 0 {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	at, ok := u.m[[2]int64{itemID, userID}]
	return ok && now.Sub(at) <= u.ttl
}

func (u *unsureBuyers) forget(itemID, userID int64) {
	if u.size.Load() == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.m, [2]int64{itemID, userID})
	u.size.Store(int64(len(u.m)))
}
