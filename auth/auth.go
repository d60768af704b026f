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
	if len(secret) == 0 {
		return "", errors.New("no secret to sign with")
	}
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

// Verifier checks tokens: the fast path (fast.go) decides Sign's, golang-jwt
// any other.
type Verifier struct {
	secret  []byte
	parser  *jwt.Parser
	now     func() time.Time
	scratch sync.Pool // of *scratch, each holding an HMAC keyed with secret
}

// NewVerifier returns a Verifier for HS256 tokens signed with secret.
func NewVerifier(secret []byte) *Verifier {
	// Its own copy: golang-jwt must never see a key the pooled MACs lack.
	secret = bytes.Clone(secret)
	v := &Verifier{secret: secret, now: time.Now}
	v.parser = jwt.NewParser(jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithExpirationRequired(), jwt.WithTimeFunc(func() time.Time { return v.now() }))
	v.scratch.New = func() any { return &scratch{mac: hmac.New(sha256.New, secret)} }
	return v
}

// Verify returns the principal of a valid token; the error wraps
// ErrInvalidToken with the reason.
func (v *Verifier) Verify(token string) (Principal, error) {
	st := v.scratch.Get().(*scratch)
	defer v.scratch.Put(st)
	p, decided, err := v.verifyFast(st.load(token), v.now(), st)
	if !decided {
		p, err = v.verifyReference(token)
	}
	return p, err
}

// verifyReference is the full golang-jwt parse, whose rules the fast path
// copies.
func (v *Verifier) verifyReference(token string) (Principal, error) {
	var c claims
	if _, err := v.parser.ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.secret, nil }); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	id, err := strconv.ParseInt(c.Subject, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != c.Subject {
		return Principal{}, fmt.Errorf("%w: sub must be a positive decimal user id", ErrInvalidToken)
	}
	role := RoleBuyer // the constants: nothing of the token is kept
	switch Role(c.Role) {
	case RoleBuyer:
	case RoleAdmin:
		role = RoleAdmin
	default:
		return Principal{}, fmt.Errorf("%w: role must be buyer or admin", ErrInvalidToken)
	}
	return Principal{UserID: id, Role: role}, nil
}
