package bench

import (
	"context"
	"errors"
	"strings"
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

// Stage 1's OIDC rows sit beside HS256's, each against the same bare gin
// rounds, with no target; the results and the console carry both ratios.
func TestStage1OIDCBesideHS256(t *testing.T) {
	win := func(rate, cpu, api float64) Window {
		return Window{PerSecond: rate, Answers: 1000, P99MS: 10, CPU: map[string]float64{"total": cpu, "api": api}}
	}
	bare := []Window{win(20000, 80, 0), win(21000, 84, 0)}
	sold := []Window{win(19000, 88, 36), win(20000, 92.4, 38)}
	oidc := []Window{win(5000, 400, 320), win(5250, 420, 330)}
	r := &stagesRun{rep: &StagesReport{Details: map[string]any{}}}
	hs := soldOutRatios("", sold, bare)
	r.stage1OIDC(bare, sold, oidc, hs)
	if len(r.rep.Ratios) != 2 || r.rep.Ratios[1].Figure != "CPU-µs per sold-out answer with OIDC tokens (RS256) vs bare gin" ||
		r.rep.Ratios[1].Target != "-" || r.rep.Ratios[1].Pairs != 2 || r.rep.Ratios[1].Ratio != 5 {
		t.Fatalf("rows: %+v", r.rep.Ratios)
	}
	o, ok := r.rep.Details["stage1_oidc"].(Stage1OIDC)
	if !ok || o.HS256.CPU.Ratio != 1.1 || o.RS256.APICPU != 325 || o.RS256.Rate.Ratio != 0.25 {
		t.Fatalf("stage1_oidc: %+v", r.rep.Details["stage1_oidc"])
	}
	var b strings.Builder
	PrintRatios(&b, r.rep)
	if !strings.Contains(b.String(), "HS256 CPU ratio 1.10 (1.10–1.10)") || !strings.Contains(b.String(), "OIDC RS256 CPU ratio 5.00 (5.00–5.00)") {
		t.Fatalf("console:\n%s", b.String())
	}
}
