package auth

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func TestSignVerifyRoundTripAndCacheHonoursExpiry(t *testing.T) {
	secret := []byte("s")
	now := time.Now()
	tok, err := Sign(secret, 1001, RoleAdmin, 2*time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(secret)
	v.now = func() time.Time { return now }
	p, err := v.Verify(tok)
	if err != nil || p.UserID != 1001 || !p.IsAdmin() {
		t.Fatalf("verify: %+v %v", p, err)
	}
	// Cached, but never past exp (the JWT library then rejects it too).
	v.now = func() time.Time { return now.Add(3 * time.Second) }
	v.parser = nil // a cache hit must not parse; a miss would panic here
	func() {
		defer func() { _ = recover() }()
		if _, err := v.Verify(tok); err == nil {
			t.Fatal("expired token served from the cache")
		}
	}()
	if _, err := NewVerifier([]byte("other")).Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("wrong secret: %v", err)
	}
	if _, err := Sign(secret, 0, RoleBuyer, time.Hour, now); err == nil {
		t.Fatal("signed a token for user 0")
	}
	if _, err := Sign(secret, 1, Role("root"), time.Hour, now); err == nil {
		t.Fatal("signed a token with an unknown role")
	}
}

// TestVerifyFastAgreesWithParser: the fast path accepts what Sign writes and
// leaves every other token to the JWT parser, so both give the same answers.
func TestVerifyFastAgreesWithParser(t *testing.T) {
	secret := []byte("fast-secret")
	now := time.Now()
	v := NewVerifier(secret)
	v.now = func() time.Time { return now }
	slow := func(tok string) (Principal, error) {
		var c claims
		if _, err := v.parser.ParseWithClaims(tok, &c, func(*jwt.Token) (any, error) { return secret, nil }); err != nil {
			return Principal{}, err
		}
		id, _ := strconv.ParseInt(c.Subject, 10, 64)
		return Principal{UserID: id, Role: Role(c.Role)}, nil
	}
	good, _ := Sign(secret, 42, RoleBuyer, time.Hour, now)
	expired, _ := Sign(secret, 42, RoleBuyer, time.Second, now.Add(-time.Minute))
	other, _ := Sign([]byte("other"), 42, RoleBuyer, time.Hour, now)
	withNbf, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, claims{Role: "admin", RegisteredClaims: jwt.RegisteredClaims{
		Subject: "7", ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), NotBefore: jwt.NewNumericDate(now.Add(time.Hour))}}).SignedString(secret)
	parts := strings.Split(good, ".")
	tamperedSig := parts[0] + "." + parts[1] + "." + strings.Repeat("A", 43)
	tamperedPayload := parts[0] + "." + parts[1][:len(parts[1])-2] + "AA." + parts[2]

	if p, _, ok := v.verifyFast(good); !ok || p.UserID != 42 || p.Role != RoleBuyer {
		t.Fatalf("fast path refused Sign's token: %+v %v", p, ok)
	}
	for name, tok := range map[string]string{"expired": expired, "other secret": other, "nbf": withNbf,
		"tampered signature": tamperedSig, "tampered payload": tamperedPayload} {
		if _, _, ok := v.verifyFast(tok); ok {
			t.Errorf("%s: fast path accepted it", name)
		}
	}
	for name, tok := range map[string]string{"good": good, "expired": expired, "other secret": other, "nbf": withNbf,
		"tampered signature": tamperedSig, "tampered payload": tamperedPayload} {
		want, werr := slow(tok)
		got, gerr := v.Verify(tok)
		if (werr == nil) != (gerr == nil) || (werr == nil && want != got) {
			t.Errorf("%s: Verify %+v %v, parser %+v %v", name, got, gerr, want, werr)
		}
	}
}

func BenchmarkVerifyFirstSight(b *testing.B) {
	secret := []byte("bench")
	toks := make([]string, 4096)
	for i := range toks {
		toks[i], _ = Sign(secret, int64(i+1), RoleBuyer, time.Hour, time.Now())
	}
	v := NewVerifier(secret)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, _, err := v.verify(toks[i%len(toks)]); err != nil {
			b.Fatal(err)
		}
	}
}
