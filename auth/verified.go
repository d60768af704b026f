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
// The entries are in shards (by the hash's first byte) so that buyers rarely
// contend for a lock. Two generations bound each shard: when the current one
// holds its share of max/2 entries it becomes the previous one and the one
// before is dropped; a hit in the previous generation moves to the current.
type verified struct {
	maxAge time.Duration
	shards []verifiedShard
}

type verifiedShard struct {
	mu        sync.Mutex
	half      int
	cur, prev map[[sha256.Size]byte]verifiedEntry
}

type verifiedEntry struct {
	p     Principal
	until time.Time
}

// verifiedMax bounds the remembered tokens (~100 bytes each), in
// verifiedShards shards.
const (
	verifiedMax    = 200_000
	verifiedShards = 64
)

// maxHashedOnStack: tokens up to this long are hashed from a stack copy
// (a provider's RS256 tokens are ~600-900 bytes).
const maxHashedOnStack = 2048

func newVerified(maxAge time.Duration, bound, shards int) *verified {
	c := &verified{maxAge: maxAge, shards: make([]verifiedShard, shards)}
	for i := range c.shards {
		c.shards[i] = verifiedShard{half: max(bound/shards/2, 1), cur: map[[sha256.Size]byte]verifiedEntry{}}
	}
	return c
}

func (c *verified) shard(k [sha256.Size]byte) *verifiedShard {
	return &c.shards[int(k[0])%len(c.shards)]
}

// tokenKey is token's SHA-256, without allocating for a token of the usual size.
func tokenKey(token string) [sha256.Size]byte {
	if len(token) > maxHashedOnStack {
		return sha256.Sum256([]byte(token))
	}
	var buf [maxHashedOnStack]byte
	return sha256.Sum256(append(buf[:0], token...))
}

// get returns token's principal when it was verified and is still good at now.
func (c *verified) get(token string, now time.Time) (Principal, [sha256.Size]byte, bool) {
	k := tokenKey(token)
	s := c.shard(k)
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cur[k]
	if !ok {
		if e, ok = s.prev[k]; ok {
			s.putLocked(k, e)
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
	s := c.shard(k)
	s.mu.Lock()
	s.putLocked(k, verifiedEntry{p: p, until: until})
	s.mu.Unlock()
}

func (s *verifiedShard) putLocked(k [sha256.Size]byte, e verifiedEntry) {
	if len(s.cur) >= s.half {
		s.prev, s.cur = s.cur, make(map[[sha256.Size]byte]verifiedEntry, s.half)
	}
	s.cur[k] = e
}
