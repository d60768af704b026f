// Package oidctest is an OpenID Connect issuer for tests: discovery, a JWKS
// whose keys the test publishes and withdraws, and tokens signed by go-jose,
// another library than the one the API verifies with.
package oidctest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Issuer serves /.well-known/openid-configuration and /jwks on URL.
type Issuer struct {
	URL     string
	t       testing.TB
	mu      sync.Mutex
	keys    map[string]jose.JSONWebKey // by kid, private
	public  []string                   // the published kids, in order
	n       int
	fetches atomic.Int64
}

// New starts an issuer, stopped when the test ends.
func New(t testing.TB) *Issuer {
	i := &Issuer{t: t, keys: map[string]jose.JSONWebKey{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": i.URL, "jwks_uri": i.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256", "ES256", "EdDSA"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		i.fetches.Add(1)
		i.mu.Lock()
		var set jose.JSONWebKeySet
		for _, kid := range i.public {
			set.Keys = append(set.Keys, pub(i.keys[kid]))
		}
		i.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	i.URL = srv.URL
	return i
}

// JWKSURL is where the keys are published.
func (i *Issuer) JWKSURL() string { return i.URL + "/jwks" }

// Fetches counts the JWKS requests served.
func (i *Issuer) Fetches() int64 { return i.fetches.Load() }

// Key makes a key for alg (RS256, ES256 or EdDSA), not yet published, and returns its kid.
func (i *Issuer) Key(alg jose.SignatureAlgorithm) string {
	var key crypto.Signer
	var err error
	switch alg {
	case jose.RS256:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.EdDSA:
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		err = fmt.Errorf("no key for %s", alg)
	}
	if err != nil {
		i.t.Fatal(err)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	i.n++
	kid := fmt.Sprintf("%s-%d", alg, i.n)
	i.keys[kid] = jose.JSONWebKey{Key: key, KeyID: kid, Algorithm: string(alg), Use: "sig"}
	return kid
}

// Publish adds kid to the JWKS.
func (i *Issuer) Publish(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.public = append(i.public, kid)
}

// Withdraw removes kid from the JWKS.
func (i *Issuer) Withdraw(kid string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	for n, k := range i.public {
		if k == kid {
			i.public = append(i.public[:n], i.public[n+1:]...)
			return
		}
	}
}

// PublicKey is kid's public key.
func (i *Issuer) PublicKey(kid string) crypto.PublicKey {
	i.mu.Lock()
	defer i.mu.Unlock()
	return pub(i.keys[kid]).Key
}

// Claims are a token's claims for buyer, issued by i for audience, valid for an hour.
func (i *Issuer) Claims(buyer int64, audience string) map[string]any {
	now := time.Now()
	return map[string]any{"iss": i.URL, "aud": audience, "sub": fmt.Sprintf("user-%d", buyer), "buyer_id": buyer,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

// Sign returns claims signed with kid's key, kid in the header.
func (i *Issuer) Sign(kid string, claims map[string]any) string {
	i.mu.Lock()
	k, ok := i.keys[kid]
	i.mu.Unlock()
	if !ok {
		i.t.Fatalf("no key %s", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.SignatureAlgorithm(k.Algorithm), Key: k},
		(&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		i.t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		i.t.Fatal(err)
	}
	return tok
}

func pub(k jose.JSONWebKey) jose.JSONWebKey { return k.Public() }
