// Package auth signs and verifies the API's bearer tokens: HS256 JWTs whose
// claims are sub (the user id, a positive int64 in decimal), role (buyer or
// admin) and exp. Anything else is rejected.
package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
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
// many cheap rejections a flash sale produces.
type Verifier struct {
	secret []byte
	parser *jwt.Parser
	now    func() time.Time

	macs sync.Pool // of hash.Hash: HMAC-SHA256 keyed with secret

	mu       sync.Mutex
	cache    map[string]cached
	maxCache int
	cacheTTL time.Duration
}

type cached struct {
	p     Principal
	until time.Time
}

// NewVerifier returns a Verifier for HS256 tokens signed with secret.
func NewVerifier(secret []byte) *Verifier {
	v := &Verifier{secret: secret}
	*v = Verifier{
		secret: secret,
		parser: jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
			jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return v.now() })),
		now:      time.Now,
		cache:    make(map[string]cached),
		maxCache: 100_000,
		cacheTTL: 30 * time.Second,
	}
	v.macs.New = func() any { return hmac.New(sha256.New, secret) }
	return v
}

// Verify returns the principal of a valid token; the error wraps
// ErrInvalidToken with the reason.
func (v *Verifier) Verify(token string) (Principal, error) {
	now := v.now()
	v.mu.Lock()
	c, ok := v.cache[token]
	v.mu.Unlock()
	if ok && now.Before(c.until) {
		return c.p, nil
	}
	p, exp, err := v.verify(token)
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
	v.cache[token] = cached{p: p, until: until}
	v.mu.Unlock()
	return p, nil
}

func (v *Verifier) verify(token string) (Principal, time.Time, error) {
	if p, exp, ok := v.verifyFast(token); ok {
		return p, exp, nil
	}
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil }); err != nil {
		return Principal{}, time.Time{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.Subject {
		return Principal{}, time.Time{}, fmt.Errorf("%w: sub must be a positive decimal user id", ErrInvalidToken)
	}
	role := Role(c.Role)
	if role != RoleBuyer && role != RoleAdmin {
		return Principal{}, time.Time{}, fmt.Errorf("%w: role must be buyer or admin", ErrInvalidToken)
	}
	return Principal{UserID: id, Role: role}, c.ExpiresAt.Time, nil
}

// fastHeader is the header segment Sign writes: {"alg":"HS256","typ":"JWT"}.
const fastHeader = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"

// verifyFast accepts exactly the tokens Sign produces — that header, claims
// {"role":R,"sub":"N","exp":E,"iat":I} in that order with integer dates — when
// the signature is right and exp is still ahead, without the generic JWT
// parser (whose JSON decoding of header and claims is most of the cost of a
// first-time token in a stampede). It never rejects: anything else, valid or
// not, goes to the generic parser, which decides (ok false). What it accepts,
// the parser would accept too: same signature check, and for this claim
// layout the parser's checks reduce to exp being after now.
func (v *Verifier) verifyFast(token string) (Principal, time.Time, bool) {
	rest, ok := strings.CutPrefix(token, fastHeader+".")
	if !ok {
		return Principal{}, time.Time{}, false
	}
	payload, sig, ok := strings.Cut(rest, ".")
	if !ok || len(sig) != 43 || len(payload) > 512 {
		return Principal{}, time.Time{}, false
	}
	var got [33]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(sig)); err != nil || n != 32 {
		return Principal{}, time.Time{}, false
	}
	mac := v.macs.Get().(hash.Hash)
	mac.Reset()
	mac.Write([]byte(token[:len(fastHeader)+1+len(payload)]))
	var want [32]byte
	mac.Sum(want[:0])
	v.macs.Put(mac)
	if !hmac.Equal(want[:], got[:32]) {
		return Principal{}, time.Time{}, false
	}
	var buf [384]byte
	n, err := base64.RawURLEncoding.Decode(buf[:], []byte(payload))
	if err != nil {
		return Principal{}, time.Time{}, false
	}
	c := string(buf[:n])
	role, c, ok := cutQuoted(c, `{"role":"`)
	if !ok || (role != string(RoleBuyer) && role != string(RoleAdmin)) {
		return Principal{}, time.Time{}, false
	}
	sub, c, ok := cutQuoted(c, `,"sub":"`)
	if !ok {
		return Principal{}, time.Time{}, false
	}
	id, err := strconv.ParseInt(sub, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != sub {
		return Principal{}, time.Time{}, false
	}
	exp, c, ok := cutInt(c, `,"exp":`)
	if !ok {
		return Principal{}, time.Time{}, false
	}
	if _, c, ok = cutInt(c, `,"iat":`); !ok || c != "}" {
		return Principal{}, time.Time{}, false
	}
	expAt := time.Unix(exp, 0)
	if !v.now().Before(expAt) {
		return Principal{}, time.Time{}, false
	}
	return Principal{UserID: id, Role: Role(role)}, expAt, true
}

// cutQuoted reads prefix, then a string without escapes up to its closing
// quote.
func cutQuoted(s, prefix string) (string, string, bool) {
	s, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return "", "", false
	}
	i := strings.IndexByte(s, '"')
	if i < 0 || strings.IndexByte(s[:i], '\\') >= 0 {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// cutInt reads prefix, then a positive integer of at most 12 digits (dates
// well past year 30000; anything larger goes to the generic parser).
func cutInt(s, prefix string) (int64, string, bool) {
	s, ok := strings.CutPrefix(s, prefix)
	if !ok {
		return 0, "", false
	}
	i := 0
	for i < len(s) && i <= 12 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i > 12 || s[0] == '0' {
		return 0, "", false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, "", false
	}
	return n, s[i:], true
}
