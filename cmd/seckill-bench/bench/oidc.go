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
	"runtime"
	"strconv"
	"time"

	"github.com/golang-jwt/jwt/v5"
	vegeta "github.com/tsenart/vegeta/v12/lib"
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

// soldOutOIDC is stage 1's subject with the issuer's tokens.
const soldOutOIDC = "sold out, OIDC tokens (RS256)"

// oidcTarget mints RS256 tokens for stage 1's buyers after the first and
// aims sold-out attempts at url with them, in the rotation the HS256 ones
// use. 5,000 per core (about 2 s of signing): a sold-out answer with an
// RS256 token costs the machine over 100 µs of CPU (API, its RS256 check of
// ~35 µs, load generator), so a core answers under ~10,000/s and each buyer
// stays under 2/s, well within its limiter (5/s, burst 10).
func (r *stagesRun) oidcTarget(url string) (func(uint64, *vegeta.Target), error) {
	n := min(5000*runtime.NumCPU(), len(r.buyers)-1)
	r.log.Info("stage 1: minting RS256 tokens for the OIDC variant", "tokens", n)
	bs, err := r.OIDC.Mint(r.buyers[1].ID, n, 2*time.Hour)
	if err != nil {
		return nil, err
	}
	r.rep.Settings["stage1_oidc_tokens"] = n
	return func(_ uint64, t *vegeta.Target) {
		i := r.nextBuyer.Add(1)
		t.Method, t.URL, t.Header = http.MethodPost, url, header(bs[i%uint64(n)].Token)
	}, nil
}

// soldOutRatios are stage 1's rate and CPU per answer of the sold-out
// answers (tokens: how they were signed, "" for HS256) against bare gin's.
func soldOutRatios(tokens string, sold, bare []Window) [2]Ratio {
	return [2]Ratio{
		sideBySide("1", "sold-out rejections/s"+tokens+" vs bare gin", perSecond(sold), perSecond(bare), "req/s", 0.8, true,
			roundsNote(len(sold), perSecond(sold), perSecond(bare), "%.0f")+"; "+othersNote(sold, bare)),
		sideBySide("1", "CPU-µs per sold-out answer"+tokens+" vs bare gin", cpuTotal(sold), cpuTotal(bare), "µs", 1.25, false,
			cpuNote(medianByKey(cpuMaps(sold)))+"; "+roundsNote(len(sold), cpuTotal(sold), cpuTotal(bare), "%.0f")),
	}
}

// Stage1Tokens is stage 1's sold-out answers with one kind of token: rate
// and CPU per answer against the same bare gin rounds, the API's share of
// the CPU and the p99 latency (medians of the rounds).
type Stage1Tokens struct {
	Rate   Ratio   `json:"rate_vs_bare_gin"`
	CPU    Ratio   `json:"cpu_vs_bare_gin"`
	APICPU float64 `json:"api_cpu_us_per_answer"`
	P99MS  float64 `json:"p99_ms"`
}

// Stage1OIDC is `stage1_oidc` in the results: HS256 and RS256 side by side.
type Stage1OIDC struct {
	HS256 Stage1Tokens `json:"hs256"`
	RS256 Stage1Tokens `json:"rs256"`
}

func stage1Tokens(ws []Window, rs [2]Ratio) Stage1Tokens {
	var p99s []float64
	for _, w := range ws {
		p99s = append(p99s, w.P99MS)
	}
	return Stage1Tokens{Rate: rs[0], CPU: rs[1], APICPU: median(column(cpuMaps(ws), "api")), P99MS: median(p99s)}
}

// stage1OIDC reports the sold-out answers with the issuer's tokens beside
// HS256's (hs256: their ratios), against the same bare gin rounds. The
// issue sets no target for them: reported only.
func (r *stagesRun) stage1OIDC(bare, sold, oidc []Window, hs256 [2]Ratio) {
	rs256 := soldOutRatios(" with OIDC tokens (RS256)", oidc, bare)
	for i := range rs256 {
		rs256[i].Target, rs256[i].Met = "-", true
	}
	r.rep.Ratios = append(r.rep.Ratios, rs256[:]...)
	r.rep.Details["stage1_oidc"] = Stage1OIDC{HS256: stage1Tokens(sold, hs256), RS256: stage1Tokens(oidc, rs256)}
}

// text is the comparison in one line for the console and the docs.
func (o Stage1OIDC) text() string {
	side := func(t Stage1Tokens) string {
		return fmt.Sprintf("CPU ratio %s (%.0f µs per answer, API %.0f µs), rate ratio %s (%.0f/s), p99 %.1f ms",
			t.CPU.ratioText(), t.CPU.Pipeline, t.APICPU, t.Rate.ratioText(), t.Rate.Pipeline, t.P99MS)
	}
	return fmt.Sprintf("Stage 1 by token against the same bare gin rounds: HS256 %s; OIDC RS256 %s.", side(o.HS256), side(o.RS256))
}
