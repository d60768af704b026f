package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// verified remembers the principals of tokens whose signatures were checked,
// so that a buyer who sends the same token again (a stampede is mostly
// retries) costs a hash and a map read instead of an RSA or ECDSA check. An
// entry is keyed by the token's SHA-256, so only the same bytes find it, and
// is trusted until the token expires or for at most maxAge after its check:
// a key the provider withdraws is refused within one JWKS refresh either way.
// Refusals are never remembered.
//
// Two generations bound it: when the current one holds max/2 entries it
// becomes the previous one and the one before is dropped; a hit in the
// previous generation moves to the current.
type verified struct {
	maxAge time.Duration
	half   int

	mu        sync.Mutex
	cur, prev map[[sha256.Size]byte]verifiedEntry
}

type verifiedEntry struct {
	p     Principal
	until time.Time
}

// verifiedMax bounds the remembered tokens (~100 bytes each).
const verifiedMax = 200_000

func newVerified(maxAge time.Duration, max int) *verified {
	return &verified{maxAge: maxAge, half: max / 2, cur: map[[sha256.Size]byte]verifiedEntry{}}
}

// get returns token's principal when it was verified and is still good at now.
func (c *verified) get(token string, now time.Time) (Principal, [sha256.Size]byte, bool) {
	k := sha256.Sum256([]byte(token))
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.cur[k]
	if !ok {
		if e, ok = c.prev[k]; ok {
			c.putLocked(k, e)
		}
	}
	if !ok || !now.Before(e.until) {
		return Principal{}, k, false
	}
	return e.p, k, true
}

// put remembers p for the token of key k, verified at now and expiring at exp.
func (c *verified) put(k [sha256.Size]byte, p Principal, now, exp time.Time) {
	until := now.Add(c.maxAge)
	if exp.Before(until) {
		until = exp
	}
	c.mu.Lock()
	c.putLocked(k, verifiedEntry{p: p, until: until})
	c.mu.Unlock()
}

func (c *verified) putLocked(k [sha256.Size]byte, e verifiedEntry) {
	if len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, make(map[[sha256.Size]byte]verifiedEntry, c.half)
	}
	c.cur[k] = e
}
