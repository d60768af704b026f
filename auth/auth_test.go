package auth

import (
	"errors"
	"testing"
	"time"
)

func TestSignVerifyRoundTripAndExpiry(t *testing.T) {
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
	v.now = func() time.Time { return now.Add(3 * time.Second) }
	if _, err := v.Verify(tok); !errors.Is(err, ErrInvalidToken) {
		t.Fatalf("expired token: %v", err)
	}
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

// BenchmarkVerify measures Verify, golang-jwt alone and a forged token.
func BenchmarkVerify(b *testing.B) {
	secret := []byte("bench")
	toks := make([]string, 4096)
	for i := range toks {
		toks[i], _ = Sign(secret, int64(i+1), RoleBuyer, time.Hour, time.Now())
	}
	b.Run("fast-path", func(b *testing.B) {
		v := NewVerifier(secret)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("golang-jwt", func(b *testing.B) { // the reference path alone, for scale
		v := NewVerifier(secret)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.verifyReference(toks[i%len(toks)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("forged", func(b *testing.B) {
		v := NewVerifier([]byte("other"))
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := v.Verify(toks[i%len(toks)]); err == nil {
				b.Fatal("forged token accepted")
			}
		}
	})
}
