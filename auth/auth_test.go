package auth

import (
	"errors"
	"testing"
	"time"
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

// BenchmarkVerify measures Verify on first sight (every call a cache miss,
// the flash-sale case: nearly every buyer's token is new) and on a cache hit.
func BenchmarkVerify(b *testing.B) {
	secret := []byte("bench")
	toks := make([]string, 4096)
	for i := range toks {
		toks[i], _ = Sign(secret, int64(i+1), RoleBuyer, time.Hour, time.Now())
	}
	b.Run("first-sight", func(b *testing.B) {
		v := NewVerifier(secret)
		v.cacheTTL = 0 // an entry is stale at once: every call verifies
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first-sight-golang-jwt", func(b *testing.B) { // the reference path alone, for scale
		v := NewVerifier(secret)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, _, err := v.verifyReference(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first-sight-forged", func(b *testing.B) {
		v := NewVerifier([]byte("other"))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err == nil {
				b.Fatal("forged token accepted")
			}
		}
	})
	b.Run("cache-hit", func(b *testing.B) {
		v := NewVerifier(secret)
		for _, tok := range toks {
			_, _ = v.Verify(tok)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
