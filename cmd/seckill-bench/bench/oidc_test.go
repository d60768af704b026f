package bench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
)

// oidcVerifier is the API's verifier pointed at iss's JWKS for audience,
// once it has fetched the keys.
func oidcVerifier(t *testing.T, iss *Issuer, audience string) *auth.OIDC {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	v, err := auth.NewOIDC(ctx, auth.OIDCOptions{JWKSURL: iss.JWKSURL(), Audience: audience, BuyerClaim: "sub",
		Refresh: time.Minute, UnknownKID: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); v.Ready(ctx) != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the verifier never loaded the bench's JWKS: %v", v.Ready(ctx))
		}
	}
	return v
}

// The bench's issuer mints RS256 tokens the API's OIDC verifier takes
// against the JWKS it serves, beside HS256 tokens routed by auth.Either;
// another audience's verifier refuses them.
func TestIssuerTokensPassTheAPIVerifier(t *testing.T) {
	iss, err := StartIssuer()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = iss.Close() }()
	buyers, err := iss.Mint(1001, 3, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("bench-test-secret")
	hs, err := MintBuyers(secret, 2001, 1, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	either := auth.Either{HS256: auth.NewVerifier(secret), OIDC: oidcVerifier(t, iss, OIDCAudience)}
	for _, b := range append(buyers, hs...) {
		p, err := either.Verify(b.Token)
		if err != nil || p.UserID != b.ID || p.Role != auth.RoleBuyer {
			t.Fatalf("buyer %d: got %+v, %v", b.ID, p, err)
		}
	}
	if buyers[2].ID != 1003 {
		t.Fatalf("ids: got %d for the third buyer, want 1003", buyers[2].ID)
	}
	other := oidcVerifier(t, iss, "another-api")
	if _, err := other.Verify(buyers[0].Token); !errors.Is(err, auth.ErrInvalidToken) {
		t.Fatalf("another audience: got %v, want ErrInvalidToken", err)
	}
}
