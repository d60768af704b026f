// Package auth signs and verifies the API's bearer tokens: HS256 JWTs whose
// claims are sub (the user id, a positive int64 in decimal), role (buyer or
// admin) and exp. Anything else is rejected.
package auth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Role is what a token allows.
type Role string

// The roles.
const (
	RoleBuyer Role = "buyer"
	RoleAdmin Role = "admin"
)

// ErrInvalidToken wraps every reason a token is refused.
var ErrInvalidToken = errors.New("invalid token")

// Principal is the verified identity behind a request.
type Principal struct {
	UserID int64
	Role   Role
}

// IsAdmin reports whether the principal may use admin routes.
func (p Principal) IsAdmin() bool { return p.Role == RoleAdmin }

type claims struct {
	Role string `json:"role"`
	jwt.RegisteredClaims
}

// Sign returns a token for user with role, valid for ttl.
func Sign(secret []byte, userID int64, role Role, ttl time.Duration, now time.Time) (string, error) {
	if userID <= 0 {
		return "", fmt.Errorf("user id must be positive, got %d", userID)
	}
	if role != RoleBuyer && role != RoleAdmin {
		return "", fmt.Errorf("role must be buyer or admin, got %q", role)
	}
	c := claims{Role: string(role), RegisteredClaims: jwt.RegisteredClaims{
		Subject:   strconv.FormatInt(userID, 10),
		IssuedAt:  jwt.NewNumericDate(now),
		ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(secret)
}

// Verifier checks tokens. Verified tokens are remembered briefly (bounded,
// never past their exp) because signature checks dominate the cost of the
// many cheap rejections a flash sale produces. A token seen for the first
// time takes the fast path (fast.go) and golang-jwt only when the fast path
// cannot decide.
type Verifier struct {
	secret  []byte
	parser  *jwt.Parser
	now     func() time.Time
	scratch sync.Pool // of *scratch, each holding an HMAC keyed with secret

	mu       sync.Mutex
	cache    map[tokenKey]cached
	maxCache int
	cacheTTL time.Duration
}

// tokenKey is a token's SHA-256, cut to 128 bits: the cache does not keep
// the tokens themselves (~200 bytes each, 100,000 of them in a full sale).
type tokenKey [16]byte

func keyOf(token []byte) tokenKey {
	sum := sha256.Sum256(token)
	return tokenKey(sum[:16])
}

type cached struct {
	p     Principal
	until time.Time
}

// NewVerifier returns a Verifier for HS256 tokens signed with secret.
func NewVerifier(secret []byte) *Verifier {
	// Its own copy: the pooled MACs are keyed once, and golang-jwt must
	// never see a different key.
	secret = bytes.Clone(secret)
	v := &Verifier{secret: secret, now: time.Now, cache: make(map[tokenKey]cached), maxCache: 100_000, cacheTTL: 30 * time.Second}
	v.parser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return v.now() }))
	v.scratch.New = func() any { return &scratch{mac: hmac.New(sha256.New, secret)} }
	return v
}

// Verify returns the principal of a valid token; the error wraps
// ErrInvalidToken with the reason.
func (v *Verifier) Verify(token string) (Principal, error) {
	now := v.now()
	st := v.scratch.Get().(*scratch)
	defer v.scratch.Put(st)
	tb := st.load(token)
	key := keyOf(tb)
	v.mu.Lock()
	c, ok := v.cache[key]
	v.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.p, nil
	}
	p, exp, decided, err := v.verifyFast(tb, now, st)
	if !decided {
		p, exp, err = v.verifyReference(token)
	}
	if err != nil {
		return Principal{}, err
	}
	until := now.Add(v.cacheTTL)
	if exp.Before(until) {
		until = exp
	}
	v.mu.Lock()
	if len(v.cache) >= v.maxCache {
		// Cheap bound: drop everything; the cache refills from hot tokens.
		clear(v.cache)
	}
	v.cache[key] = cached{p: p, until: until}
	v.mu.Unlock()
	return p, nil
}

// verifyReference is the full golang-jwt parse: the rules the fast path
// copies, and the path for every token the fast path leaves undecided.
func (v *Verifier) verifyReference(token string) (Principal, time.Time, error) {
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil }); err != nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.Subject {
		return Principal{}, time.Time{}, fmt.Errorf("%w: sub must be a positive decimal user id", ErrInvalidToken)
	}
	var role Role // the constants: nothing of the token is kept
	switch Role(c.Role) {
	case RoleBuyer:
		role = RoleBuyer
	case RoleAdmin:
		role = RoleAdmin
	default:
		return Principal{}, time.Time{}, fmt.Errorf("%w: role must be buyer or admin", ErrInvalidToken)
	}
	return Principal{UserID: id, Role: role}, c.ExpiresAt.Time, nil
}
