package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
)

// OIDCOptions point an OIDC verifier at an identity provider.
type OIDCOptions struct {
	Issuer     string // the iss every token must carry; its discovery document names the JWKS unless JWKSURL
	JWKSURL    string
	Audience   string // required in aud
	BuyerClaim string // holds the buyer id, a positive integer (number or decimal string)
	// AdminClaim (a name, or a dotted path into objects) holding AdminValue,
	// or a list containing it, makes the token an admin's; empty: no admins.
	AdminClaim string
	AdminValue string
	Refresh    time.Duration // the JWKS is fetched again this often
	// UnknownKID is the least time between fetches for a kid the keys lack.
	UnknownKID time.Duration
	Client     *http.Client // nil: http.DefaultClient
	Log        *slog.Logger
}

// OIDC limits: a fetch's time, the clock skew allowed with the provider, and
// how often a failed first load may be tried again.
const (
	oidcFetchTimeout = 5 * time.Second
	oidcLeeway       = 30 * time.Second
	oidcRetryLoad    = 2 * time.Second
)

// OIDCAlgorithms are the signatures an OIDC token may carry.
var OIDCAlgorithms = []string{"RS256", "ES256", "EdDSA"}

var errKeysNotLoaded = fmt.Errorf("%w: the identity provider's keys are not loaded yet", ErrInvalidToken)

// OIDC verifies tokens signed by an identity provider's published keys: the
// keys are fetched once and kept by kid (keyfunc), fetched again every
// Refresh and, rate-limited, for a kid they lack.
type OIDC struct {
	opts   OIDCOptions
	parser *jwt.Parser
	now    func() time.Time
	ctx    context.Context // ends the refreshes
	keys   atomic.Pointer[keyfunc.Keyfunc]
	seen   *verified // tokens checked before, by their hash

	loading  sync.Mutex // one load at a time; verifiers never wait for it
	lastLoad time.Time
	loadErr  error
}

// NewOIDC returns a verifier that loads the provider's keys in the
// background; ctx ends its refreshes.
func NewOIDC(ctx context.Context, o OIDCOptions) (*OIDC, error) {
	if o.Issuer == "" && o.JWKSURL == "" || o.Audience == "" || o.BuyerClaim == "" {
		return nil, errors.New("oidc: an issuer or a JWKS URL, an audience and a buyer claim are required")
	}
	if o.Client == nil {
		o.Client = http.DefaultClient
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	maxAge := o.Refresh
	if maxAge <= 0 {
		maxAge = time.Minute
	}
	v := &OIDC{opts: o, now: time.Now, ctx: ctx, seen: newVerified(maxAge, verifiedMax, verifiedShards)}
	popts := []jwt.ParserOption{jwt.WithValidMethods(OIDCAlgorithms), jwt.WithAudience(o.Audience), jwt.WithExpirationRequired(),
		jwt.WithLeeway(oidcLeeway), jwt.WithJSONNumber(), jwt.WithTimeFunc(func() time.Time { return v.now() })}
	if o.Issuer != "" {
		popts = append(popts, jwt.WithIssuer(o.Issuer))
	}
	v.parser = jwt.NewParser(popts...)
	go func() { _ = v.Ready(ctx) }()
	return v, nil
}

// Ready reports whether the keys were fetched once; until then it tries
// (at most every two seconds, never waiting for another try).
func (v *OIDC) Ready(ctx context.Context) error {
	_, err := v.keyfunc(ctx)
	return err
}

func (v *OIDC) keyfunc(ctx context.Context) (keyfunc.Keyfunc, error) {
	if k := v.keys.Load(); k != nil {
		return *k, nil
	}
	if !v.loading.TryLock() {
		return nil, errKeysNotLoaded
	}
	defer v.loading.Unlock()
	if k := v.keys.Load(); k != nil {
		return *k, nil
	}
	if time.Since(v.lastLoad) < oidcRetryLoad {
		return nil, v.loadErr
	}
	v.lastLoad = time.Now()
	k, err := v.load(ctx)
	if err != nil {
		v.loadErr = fmt.Errorf("%w: %w", errKeysNotLoaded, err)
		v.opts.Log.Warn("oidc: the identity provider's keys are not loaded", "err", err)
		return nil, v.loadErr
	}
	v.keys.Store(&k)
	return k, nil
}

// load discovers the JWKS URL if need be and fetches the keys once.
func (v *OIDC) load(ctx context.Context) (_ keyfunc.Keyfunc, err error) {
	ctx, cancel := context.WithTimeout(ctx, oidcFetchTimeout)
	defer cancel()
	u := v.opts.JWKSURL
	if u == "" {
		if u, err = v.discover(ctx); err != nil {
			return nil, err
		}
	}
	// The refreshes live as long as v; a failed first fetch ends its own.
	life, stop := context.WithCancel(v.ctx)
	defer func() {
		if err != nil {
			stop()
		}
	}()
	cache, err := jwkset.NewStorageFromHTTP(u, jwkset.HTTPClientStorageOptions{
		Client: v.opts.Client, Ctx: life, HTTPTimeout: oidcFetchTimeout, RefreshInterval: v.opts.Refresh,
		RefreshErrorHandler: func(_ context.Context, err error) {
			v.opts.Log.Warn("oidc: JWKS refresh failed; the keys fetched last stay in use", "url", u, "err", err)
		},
	})
	if err != nil {
		return nil, err
	}
	refreshing, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs: map[string]jwkset.Storage{u: cache}, PrioritizeHTTP: true,
		RateLimitWaitMax:  oidcFetchTimeout, // also the fetch's time: it runs in the same context
		RefreshUnknownKID: rate.NewLimiter(rate.Every(v.opts.UnknownKID), 1),
	})
	if err != nil {
		return nil, err
	}
	return keyfunc.New(keyfunc.Options{Ctx: v.ctx, Storage: &keyStore{Storage: refreshing, cache: cache}})
}

// discover reads the JWKS URL from the issuer's discovery document, whose
// issuer must be the one configured (OpenID Connect Discovery 1.0, 4.3).
func (v *OIDC) discover(ctx context.Context) (string, error) {
	u := strings.TrimSuffix(v.opts.Issuer, "/") + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	res, err := v.opts.Client.Do(req)
	if err != nil {
		return "", fmt.Errorf("discovery: %w", err)
	}
	defer func() { _ = res.Body.Close() }()
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if res.StatusCode != http.StatusOK {
		return "", fmt.Errorf("discovery: %s answered %s", u, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		return "", fmt.Errorf("discovery: %s: %w", u, err)
	}
	if doc.Issuer != v.opts.Issuer || doc.JWKSURI == "" {
		return "", fmt.Errorf("discovery: %s names issuer %q (want %q) and jwks_uri %q", u, doc.Issuer, v.opts.Issuer, doc.JWKSURI)
	}
	return doc.JWKSURI, nil
}

// keyStore reads a kid from the keys held and, only for a kid they lack,
// through the rate-limited refresh, one read per kid at a time: the buyers
// who bring a new key's first tokens together wait for one fetch.
type keyStore struct {
	jwkset.Storage // refreshes for an unknown kid
	cache          jwkset.Storage
	flights        singleflight.Group
}

func (s *keyStore) KeyRead(ctx context.Context, kid string) (jwkset.JWK, error) {
	if k, err := s.cache.KeyRead(ctx, kid); err == nil {
		return k, nil
	}
	k, err, _ := s.flights.Do(kid, func() (any, error) { return s.Storage.KeyRead(ctx, kid) })
	if err != nil {
		return jwkset.JWK{}, err
	}
	return k.(jwkset.JWK), nil
}

// Verify returns the principal of a valid token; the error wraps
// ErrInvalidToken with the reason. A token verified before is taken from
// the verified tokens until it expires or the keys' next refresh is due
// (verified.go): the signature is checked once per token, not per request.
func (v *OIDC) Verify(token string) (Principal, error) {
	now := v.now()
	p, k, ok := v.seen.get(token, now)
	if ok {
		return p, nil
	}
	p, exp, err := v.verify(token)
	if err != nil {
		return Principal{}, err
	}
	v.seen.put(k, p, now, exp)
	return p, nil
}

// verify checks token's signature, claims and principal; exp is its expiry.
func (v *OIDC) verify(token string) (_ Principal, exp time.Time, _ error) {
	kf, err := v.keyfunc(v.ctx)
	if err != nil {
		return Principal{}, exp, err
	}
	c := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, c, kf.Keyfunc); err != nil {
		return Principal{}, exp, fmt.Errorf("%w: %w", ErrInvalidToken, err)
	}
	if e, err := c.GetExpirationTime(); err == nil && e != nil {
		exp = e.Time
	}
	id, ok := positiveID(claim(c, v.opts.BuyerClaim))
	if !ok {
		return Principal{}, exp, fmt.Errorf("%w: claim %s must hold a positive integer buyer id", ErrInvalidToken, v.opts.BuyerClaim)
	}
	p := Principal{UserID: id, Role: RoleBuyer}
	if v.opts.AdminClaim != "" && holds(claim(c, v.opts.AdminClaim), v.opts.AdminValue) {
		p.Role = RoleAdmin
	}
	return p, exp, nil
}

// claim is the claim named name, or else at its dotted path (Keycloak's
// realm_access.roles); nil when absent.
func claim(c map[string]any, name string) any {
	if v, ok := c[name]; ok {
		return v
	}
	var at any = c
	for _, part := range strings.Split(name, ".") {
		m, ok := at.(map[string]any)
		if !ok {
			return nil
		}
		at = m[part]
	}
	return at
}

// positiveID reads a positive int64 in canonical decimal, as a JSON number or string.
func positiveID(v any) (int64, bool) {
	var s string
	switch v := v.(type) {
	case json.Number:
		s = v.String()
	case string:
		s = v
	default:
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil && id > 0 && strconv.FormatInt(id, 10) == s
}

// holds reports whether v is want or a list containing it.
func holds(v any, want string) bool {
	if list, ok := v.([]any); ok {
		for _, e := range list {
			if e == want {
				return true
			}
		}
		return false
	}
	return v == want
}

// Either verifies a token whose header names HS256 with HS256 (nil: such
// tokens are refused) and any other with OIDC.
type Either struct {
	HS256 *Verifier
	OIDC  *OIDC
}

var errNoHS256 = fmt.Errorf("%w: HS256 tokens are off (no shared secret)", ErrInvalidToken)

func (e Either) Verify(token string) (Principal, error) {
	if !isHS256(token) {
		return e.OIDC.Verify(token)
	}
	if e.HS256 == nil {
		return Principal{}, errNoHS256
	}
	return e.HS256.Verify(token)
}

// isHS256 reports whether token's header names alg HS256 (Sign's header
// without decoding it).
func isHS256(token string) bool {
	h, _, _ := strings.Cut(token, ".")
	if h == stdHeader {
		return true
	}
	b, err := base64.RawURLEncoding.DecodeString(h)
	var head struct {
		Alg string `json:"alg"`
	}
	return err == nil && json.Unmarshal(b, &head) == nil && head.Alg == jwt.SigningMethodHS256.Alg()
}
