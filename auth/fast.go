package auth

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"fmt"
	"hash"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// The fast path decides a token without golang-jwt's
// map-and-reflection decode, and only where the answer is certainly the one
// golang-jwt (as configured in NewVerifier) would give:
//
//   - A token whose HMAC-SHA256 does not match is refused outright: golang-jwt
//     accepts only alg HS256 with exactly this MAC, so every forged or garbled
//     token is a cheap rejection, whatever its header says.
//   - A correctly signed token is decided here only if its header and claims
//     are byte for byte the shape Sign produces; any other shape (extra
//     claims, nbf, fractional dates, escapes, whitespace, ...) goes to
//     golang-jwt. Only Sign issues our tokens, so that fallback is rare.
//
// Segments are decoded with base64.RawURLEncoding, the decoder golang-jwt
// uses by default (not strict: '\r' and '\n' are skipped, unused trailing
// bits are ignored), so both read the same bytes from the same text.
// FuzzVerifyMatchesGolangJWT holds the two paths to the same answers.

// maxFastToken bounds the tokens copied into pooled buffers; Sign's tokens
// are under 200 bytes, and longer ones go straight to golang-jwt.
const maxFastToken = 512

// stdHeader is the header segment Sign produces, taken from golang-jwt itself
// so it follows the library's encoding: {"alg":"HS256","typ":"JWT"}.
var stdHeader = func() string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{}).SigningString()
	if err != nil {
		panic(err)
	}
	h, _, _ := strings.Cut(s, ".")
	return h
}()

// Rejections of the fast path, built once: refusing a token allocates nothing.
var (
	errMalformed = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenMalformed)
	errSignature = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenSignatureInvalid)
	errExpired   = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenExpired)
)

// scratch is one goroutine's working set, pooled: an HMAC already keyed with
// the secret (hmac.New precomputes the pads; Reset restores them) and buffers
// for the token and its decoded segments.
type scratch struct {
	mac    hash.Hash
	tok    []byte
	sum    [32]byte
	sig    [64]byte
	claims [192]byte
}

// load returns token as bytes, copied into the pooled buffer when it is short
// enough to be worth keeping.
func (st *scratch) load(token string) []byte {
	if len(token) > maxFastToken {
		return []byte(token)
	}
	st.tok = append(st.tok[:0], token...)
	return st.tok
}

// verifyFast reports decided=false when golang-jwt must decide.
func (v *Verifier) verifyFast(tok []byte, now time.Time, st *scratch) (Principal, bool, error) {
	// golang-jwt: exactly three segments.
	h, rest, ok := bytes.Cut(tok, []byte("."))
	if !ok {
		return Principal{}, true, errMalformed
	}
	c, s, ok := bytes.Cut(rest, []byte("."))
	if !ok || bytes.IndexByte(s, '.') >= 0 {
		return Principal{}, true, errMalformed
	}
	sig := st.sig[:]
	if n := base64.RawURLEncoding.DecodedLen(len(s)); n > len(sig) {
		sig = make([]byte, n) // no HS256 signature: decoded only to tell malformed from forged
	}
	n, err := base64.RawURLEncoding.Decode(sig, s)
	if err != nil {
		return Principal{}, true, errMalformed
	}
	sig = sig[:n]
	st.mac.Reset()
	st.mac.Write(tok[:len(h)+1+len(c)]) // header.claims, as golang-jwt signs them
	if !hmac.Equal(sig, st.mac.Sum(st.sum[:0])) {
		return Principal{}, true, errSignature
	}

	if string(h) != stdHeader || base64.RawURLEncoding.DecodedLen(len(c)) > len(st.claims) {
		return Principal{}, false, nil
	}
	n, err = base64.RawURLEncoding.Decode(st.claims[:], c)
	if err != nil {
		return Principal{}, false, nil
	}
	p, exp, ok := parseSignedClaims(st.claims[:n])
	if !ok {
		return Principal{}, false, nil
	}
	// golang-jwt's rules with no leeway: exp required and strictly after
	// now (Sign writes no nbf, and iat is not checked). Its dates are
	// truncated to jwt.TimePrecision.
	if !now.Before(time.Unix(exp, 0).Truncate(jwt.TimePrecision)) {
		return Principal{}, true, errExpired
	}
	return p, true, nil
}

// parseSignedClaims reads claims in exactly Sign's shape,
//
//	{"role":"buyer","sub":"1001","exp":1700003600,"iat":1700000000}
//
// and reports ok=false for anything else. The shape leaves JSON nothing to
// interpret (no escapes, duplicates, spacing or other keys), and its numbers
// are what golang-jwt would read too: sub has at most 18 digits and no
// leading zero, so it is a positive int64 in canonical decimal; exp and iat
// are integers of at most 15 digits, exact as the float64 golang-jwt parses.
func parseSignedClaims(b []byte) (p Principal, exp int64, ok bool) {
	if b, ok = bytes.CutPrefix(b, []byte(`{"role":"`)); !ok {
		return Principal{}, 0, false
	}
	switch {
	case bytes.HasPrefix(b, []byte(RoleBuyer)):
		p.Role, b = RoleBuyer, b[len(RoleBuyer):]
	case bytes.HasPrefix(b, []byte(RoleAdmin)):
		p.Role, b = RoleAdmin, b[len(RoleAdmin):]
	default:
		return Principal{}, 0, false
	}
	if b, ok = bytes.CutPrefix(b, []byte(`","sub":"`)); !ok {
		return Principal{}, 0, false
	}
	if p.UserID, b, ok = leadingNumber(b, 18); !ok {
		return Principal{}, 0, false
	}
	if b, ok = bytes.CutPrefix(b, []byte(`","exp":`)); !ok {
		return Principal{}, 0, false
	}
	if exp, b, ok = leadingNumber(b, 15); !ok {
		return Principal{}, 0, false
	}
	if b, ok = bytes.CutPrefix(b, []byte(`,"iat":`)); !ok {
		return Principal{}, 0, false
	}
	if _, b, ok = leadingNumber(b, 15); !ok {
		return Principal{}, 0, false
	}
	if string(b) != "}" {
		return Principal{}, 0, false
	}
	return p, exp, true
}

// leadingNumber reads 1 to maxDigits decimal digits, the first not 0, and
// returns their value and what follows them.
func leadingNumber(b []byte, maxDigits int) (int64, []byte, bool) {
	var n int64
	i := 0
	for ; i < len(b) && i < maxDigits+1 && '0' <= b[i] && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	if i == 0 || i > maxDigits || b[0] == '0' {
		return 0, nil, false
	}
	return n, b[i:], true
}
