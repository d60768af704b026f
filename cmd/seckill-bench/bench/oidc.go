package bench

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// OIDCAudience is the audience of the bench's identity provider's tokens.
const OIDCAudience = "seckill-bench"

// Issuer is the bench's own identity provider: one RS256 key made at start,
// published as a JWKS on a free loopback port, and tokens signed with it.
type Issuer struct {
	url string
	kid string
	key *rsa.PrivateKey
	srv *http.Server
}

// StartIssuer makes the key and serves its JWKS until Close.
func StartIssuer() (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	i := &Issuer{url: "http://" + l.Addr().String(), kid: "bench-" + strconv.FormatInt(time.Now().Unix(), 36), key: key}
	jwks, err := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": i.kid,
		"n": base64.RawURLEncoding.EncodeToString(key.N.Bytes()),
		"e": base64.RawURLEncoding.EncodeToString(big.NewInt(int64(key.E)).Bytes())}}})
	if err != nil {
		return nil, errors.Join(err, l.Close())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(jwks)
	})
	i.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = i.srv.Serve(l) }()
	return i, nil
}

// JWKSURL is where the key is published.
func (i *Issuer) JWKSURL() string { return i.url + "/jwks" }

// Env points an API at the issuer (SECKILL_AUTH_OIDC_*).
func (i *Issuer) Env() []string {
	return []string{"SECKILL_AUTH_OIDC_JWKS_URL=" + i.JWKSURL(), "SECKILL_AUTH_OIDC_AUDIENCE=" + OIDCAudience}
}

// Close stops serving the JWKS.
func (i *Issuer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return i.srv.Shutdown(ctx)
}

// Mint signs an RS256 buyer token per id first..first+n-1 (sub: the id), on
// every core (an RSA signature costs about a millisecond).
func (i *Issuer) Mint(first int64, n int, ttl time.Duration) ([]Buyer, error) {
	now := time.Now()
	return mintEach(first, n, func(id int64) (string, error) {
		t := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.RegisteredClaims{Issuer: i.url, Subject: strconv.FormatInt(id, 10),
			Audience: jwt.ClaimStrings{OIDCAudience}, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl))})
		t.Header["kid"] = i.kid
		tok, err := t.SignedString(i.key)
		if err != nil {
			return "", fmt.Errorf("sign an RS256 token: %w", err)
		}
		return tok, nil
	})
}
