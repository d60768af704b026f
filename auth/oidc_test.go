package auth_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/auth/oidctest"
)

const audience = "seckill-test"

// newOIDC is a verifier of iss's tokens (buyer_id, admin by realm_access.roles
// holding seckill-admin), ready once its keys are loaded.
func newOIDC(t testing.TB, iss *oidctest.Issuer, edit func(*auth.OIDCOptions)) *auth.OIDC {
	t.Helper()
	o := auth.OIDCOptions{Issuer: iss.URL, Audience: audience, BuyerClaim: "buyer_id", AdminClaim: "realm_access.roles",
		AdminValue: "seckill-admin", Refresh: time.Hour, UnknownKID: time.Hour}
	if edit != nil {
		edit(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := auth.NewOIDC(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, v)
	return v
}

// waitReady waits until v's keys are loaded (its first load runs in the background).
func waitReady(t testing.TB, v *auth.OIDC) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for err := v.Ready(context.Background()); err != nil; err = v.Ready(context.Background()) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type verifier interface {
	Verify(token string) (auth.Principal, error)
}

// refused fails unless tok is refused as an invalid token.
func refused(t *testing.T, v verifier, what, tok string) {
	t.Helper()
	if p, err := v.Verify(tok); !errors.Is(err, auth.ErrInvalidToken) {
		t.Errorf("%s: %+v, %v; want ErrInvalidToken", what, p, err)
	}
}

func TestOIDCVerifiesEachAlgorithm(t *testing.T) {
	iss := oidctest.New(t)
	kids := map[jose.SignatureAlgorithm]string{}
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		kids[alg] = iss.Key(alg)
		iss.Publish(kids[alg])
	}
	v := newOIDC(t, iss, nil)
	for alg, kid := range kids {
		p, err := v.Verify(iss.Sign(kid, iss.Claims(1001, audience)))
		if err != nil || p != (auth.Principal{UserID: 1001, Role: auth.RoleBuyer}) {
			t.Errorf("%s: %+v, %v", alg, p, err)
		}
		c := iss.Claims(7, audience)
		c["realm_access"] = map[string]any{"roles": []string{"offline_access", "seckill-admin"}}
		if p, err := v.Verify(iss.Sign(kid, c)); err != nil || p != (auth.Principal{UserID: 7, Role: auth.RoleAdmin}) {
			t.Errorf("%s admin: %+v, %v", alg, p, err)
		}
	}
	if n := iss.Fetches(); n != 1 {
		t.Errorf("%d JWKS fetches for three known keys, want 1", n)
	}

	// A JWKS URL instead of discovery, the buyer id in sub as a string.
	byURL := newOIDC(t, iss, func(o *auth.OIDCOptions) { o.Issuer, o.JWKSURL, o.BuyerClaim = "", iss.JWKSURL(), "sub" })
	c := iss.Claims(1, audience)
	c["sub"] = "42"
	if p, err := byURL.Verify(iss.Sign(kids[jose.ES256], c)); err != nil || p.UserID != 42 {
		t.Errorf("by JWKS URL: %+v, %v", p, err)
	}
}

func TestOIDCRefusals(t *testing.T) {
	iss := oidctest.New(t)
	rsa, ec := iss.Key(jose.RS256), iss.Key(jose.ES256)
	iss.Publish(rsa)
	iss.Publish(ec)
	v := newOIDC(t, iss, nil)
	with := func(edit func(c map[string]any)) string {
		c := iss.Claims(1001, audience)
		edit(c)
		return iss.Sign(rsa, c)
	}
	refused(t, v, "expired", with(func(c map[string]any) { c["exp"] = time.Now().Add(-2 * time.Minute).Unix() }))
	refused(t, v, "no exp", with(func(c map[string]any) { delete(c, "exp") }))
	refused(t, v, "not yet valid", with(func(c map[string]any) { c["nbf"] = time.Now().Add(5 * time.Minute).Unix() }))
	refused(t, v, "wrong audience", with(func(c map[string]any) { c["aud"] = "another-app" }))
	refused(t, v, "wrong issuer", with(func(c map[string]any) { c["iss"] = "https://evil.example" }))
	refused(t, v, "no buyer id", with(func(c map[string]any) { delete(c, "buyer_id") }))
	for _, id := range []any{0, -5, 1.5, "007", "abc", true} {
		refused(t, v, fmt.Sprintf("buyer id %v", id), with(func(c map[string]any) { c["buyer_id"] = id }))
	}
	// Signed by a key the issuer never published, under a published kid.
	other := iss.Key(jose.RS256)
	forged := strings.Split(iss.Sign(other, iss.Claims(1001, audience)), ".")
	good := strings.Split(iss.Sign(rsa, iss.Claims(1001, audience)), ".")
	refused(t, v, "signature of another key", good[0]+"."+forged[1]+"."+forged[2])
	// An ES256 header on the RSA key's kid.
	refused(t, v, "alg of another key", segment(map[string]any{"alg": "ES256", "kid": rsa})+"."+good[1]+"."+good[2])

	// alg none, with and without a kid.
	for _, h := range []map[string]any{{"alg": "none"}, {"alg": "none", "kid": rsa}, {"alg": "NONE", "typ": "JWT"}} {
		refused(t, v, fmt.Sprintf("header %v", h), segment(h)+"."+good[1]+".")
	}
	// HS256 keyed with the RSA public key, as PEM and DER: the key confusion.
	der, err := x509.MarshalPKIXPublicKey(iss.PublicKey(rsa))
	if err != nil {
		t.Fatal(err)
	}
	claims := jwt.MapClaims(iss.Claims(1001, audience))
	for _, key := range [][]byte{pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), der} {
		tok := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
		tok.Header["kid"] = rsa
		s, err := tok.SignedString(key)
		if err != nil {
			t.Fatal(err)
		}
		refused(t, v, "HS256 with the public key", s)
		refused(t, auth.Either{OIDC: v}, "HS256 with the public key, no shared secret", s)
		refused(t, auth.Either{OIDC: v, HS256: auth.NewVerifier([]byte("shared-secret"))}, "HS256 with the public key, a shared secret", s)
	}
	refused(t, v, "garbage", "a.b.c")
}

// segment is m as a JWT segment.
func segment(m map[string]any) string {
	b, _ := json.Marshal(m)
	return base64.RawURLEncoding.EncodeToString(b)
}

func TestOIDCUnknownKIDRefreshesOnce(t *testing.T) {
	t.Run("published since", func(t *testing.T) {
		iss := oidctest.New(t)
		iss.Publish(iss.Key(jose.RS256))
		v := newOIDC(t, iss, nil)
		kid := iss.Key(jose.ES256)
		iss.Publish(kid)
		if p, err := v.Verify(iss.Sign(kid, iss.Claims(5, audience))); err != nil || p.UserID != 5 {
			t.Fatalf("a key published since the last fetch: %+v, %v", p, err)
		}
		if n := iss.Fetches(); n != 2 {
			t.Fatalf("%d fetches, want 2 (the first, then one for the new kid)", n)
		}
	})
	t.Run("never published", func(t *testing.T) {
		iss := oidctest.New(t)
		iss.Publish(iss.Key(jose.RS256))
		v := newOIDC(t, iss, nil)
		kid := iss.Key(jose.RS256)
		refused(t, v, "unpublished kid", iss.Sign(kid, iss.Claims(5, audience)))
		refused(t, v, "unpublished kid again", iss.Sign(kid, iss.Claims(5, audience)))
		if n := iss.Fetches(); n != 2 {
			t.Fatalf("%d fetches, want 2 (the first, then one the limit allows)", n)
		}
	})
}

// A flood of tokens under forged kids costs the provider a fetch or two,
// and real tokens keep verifying through it.
func TestOIDCForgedKIDFloodIsRateLimited(t *testing.T) {
	iss := oidctest.New(t)
	kid := iss.Key(jose.ES256)
	iss.Publish(kid)
	v := newOIDC(t, iss, func(o *auth.OIDCOptions) { o.UnknownKID = time.Minute })
	real := iss.Sign(kid, iss.Claims(9, audience))
	parts := strings.Split(real, ".")
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for i := range 50 {
				refused(t, v, "forged kid", segment(map[string]any{"alg": "ES256", "kid": fmt.Sprintf("forged-%d-%d", w, i)})+"."+parts[1]+"."+parts[2])
				if i%10 == 0 {
					if _, err := v.Verify(real); err != nil {
						t.Errorf("a real token during the flood: %v", err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := iss.Fetches(); n > 3 {
		t.Fatalf("1,000 forged kids made %d JWKS fetches, want at most 3", n)
	}
	t.Logf("1,000 forged kids: %d JWKS fetches", iss.Fetches())
}

// A new key's first tokens, arriving together, wait for one fetch; a
// withdrawn key's tokens are refused once the keys are fetched again.
func TestOIDCRotation(t *testing.T) {
	iss := oidctest.New(t)
	old := iss.Key(jose.RS256)
	iss.Publish(old)
	v := newOIDC(t, iss, nil)
	next := iss.Key(jose.ES256)
	iss.Publish(next)
	toks := make([]string, 200)
	for i := range toks {
		kid := next
		if i%2 == 0 {
			kid = old
		}
		toks[i] = iss.Sign(kid, iss.Claims(int64(i+1), audience))
	}
	var wg sync.WaitGroup
	gun := make(chan struct{})
	for i, tok := range toks {
		wg.Go(func() {
			<-gun
			if p, err := v.Verify(tok); err != nil || p.UserID != int64(i+1) {
				t.Errorf("token %d during the rotation: %+v, %v", i, p, err)
			}
		})
	}
	close(gun)
	wg.Wait()
	if n := iss.Fetches(); n != 2 {
		t.Fatalf("%d fetches, want 2: the new kid's first tokens share one", n)
	}

	fast := newOIDC(t, iss, func(o *auth.OIDCOptions) { o.Refresh = 20 * time.Millisecond })
	oldTok, nextTok := iss.Sign(old, iss.Claims(1, audience)), iss.Sign(next, iss.Claims(2, audience))
	iss.Withdraw(old)
	deadline := time.Now().Add(10 * time.Second)
	for _, err := fast.Verify(oldTok); err == nil; _, err = fast.Verify(oldTok) {
		if _, err := fast.Verify(nextTok); err != nil {
			t.Fatalf("the current key's token: %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("a withdrawn key's token still verifies after 10 s of 20 ms refreshes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := fast.Verify(nextTok); err != nil {
		t.Fatalf("the current key's token after the withdrawal: %v", err)
	}
}

func TestOIDCNotReadyUntilKeysLoad(t *testing.T) {
	down := httptest.NewServer(nil) // 404 for everything
	iss := oidctest.New(t)
	kid := iss.Key(jose.RS256)
	iss.Publish(kid)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := auth.NewOIDC(ctx, auth.OIDCOptions{JWKSURL: down.URL + "/jwks", Audience: audience, BuyerClaim: "buyer_id",
		Refresh: time.Hour, UnknownKID: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Ready(ctx); err == nil {
		t.Fatal("ready with no keys")
	}
	refused(t, v, "before the keys load", iss.Sign(kid, iss.Claims(1, audience)))
	down.Close()
	if _, err := auth.NewOIDC(ctx, auth.OIDCOptions{Audience: audience, BuyerClaim: "sub"}); err == nil {
		t.Fatal("an OIDC verifier with no issuer nor JWKS URL")
	}
}

func TestEitherRoutesByAlgorithm(t *testing.T) {
	iss := oidctest.New(t)
	kid := iss.Key(jose.RS256)
	iss.Publish(kid)
	secret := []byte("shared-secret")
	hs, err := auth.Sign(secret, 3, auth.RoleAdmin, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	e := auth.Either{OIDC: newOIDC(t, iss, nil), HS256: auth.NewVerifier(secret)}
	if p, err := e.Verify(hs); err != nil || p != (auth.Principal{UserID: 3, Role: auth.RoleAdmin}) {
		t.Fatalf("HS256 through Either: %+v, %v", p, err)
	}
	if p, err := e.Verify(iss.Sign(kid, iss.Claims(4, audience))); err != nil || p.UserID != 4 {
		t.Fatalf("RS256 through Either: %+v, %v", p, err)
	}
	// An HS256 token in another header shape still goes to the shared secret.
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "8", "role": "buyer", "exp": time.Now().Add(time.Hour).Unix()})
	tok.Header["kid"] = "hs"
	s, _ := tok.SignedString(secret)
	if p, err := e.Verify(s); err != nil || p.UserID != 8 {
		t.Fatalf("HS256 with a kid through Either: %+v, %v", p, err)
	}
	refused(t, auth.Either{OIDC: e.OIDC}, "HS256 without a shared secret", hs)
}

// A token remembered as verified is still refused once it expired, and
// bytes changed in its signature are checked again (and refused).
func TestOIDCRemembersVerifiedTokensOnlyWhileGood(t *testing.T) {
	iss := oidctest.New(t)
	kid := iss.Key(jose.RS256)
	iss.Publish(kid)
	v := newOIDC(t, iss, nil)
	var mu sync.Mutex
	now := time.Now()
	v.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	tok := iss.Sign(kid, iss.Claims(5, audience)) // exp in an hour
	for range 2 {
		if p, err := v.Verify(tok); err != nil || p.UserID != 5 {
			t.Fatalf("a fresh token: %+v, %v", p, err)
		}
	}
	h, rest, _ := strings.Cut(tok, ".")
	body, sig, _ := strings.Cut(rest, ".")
	flipped := []byte(sig)
	flipped[len(flipped)/2] ^= 1
	refused(t, v, "the remembered token with a changed signature", h+"."+body+"."+string(flipped))
	mu.Lock()
	now = now.Add(time.Hour + 31*time.Second) // past exp and the parser's 30 s of skew
	mu.Unlock()
	refused(t, v, "the remembered token once expired", tok)
}

// BenchmarkVerifyOIDC compares a token's verification: the HS256 fast path,
// and the provider's tokens with their key cached (each token after its first
// check is a remembered one: a hash and a map read).
func BenchmarkVerifyOIDC(b *testing.B) {
	iss := oidctest.New(b)
	secret := []byte("bench-secret")
	hs, _ := auth.Sign(secret, 1001, auth.RoleBuyer, time.Hour, time.Now())
	run := func(name string, v verifier, tok string) {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := v.Verify(tok); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("HS256-fast-path", auth.NewVerifier(secret), hs)
	kids := map[jose.SignatureAlgorithm]string{}
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		kids[alg] = iss.Key(alg)
		iss.Publish(kids[alg])
	}
	v := newOIDC(b, iss, nil)
	run("HS256-via-Either", auth.Either{OIDC: v, HS256: auth.NewVerifier(secret)}, hs)
	for _, alg := range []jose.SignatureAlgorithm{jose.RS256, jose.ES256, jose.EdDSA} {
		run("OIDC-"+string(alg), v, iss.Sign(kids[alg], iss.Claims(1001, audience)))
	}
}
