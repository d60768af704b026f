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

// The fast path decides a token without golang-jwt's reflection, only where
// the answer is certainly golang-jwt's (FuzzVerifyMatchesGolangJWT holds
// them equal): a token whose HMAC-SHA256 does not match is refused (golang-jwt
// accepts only HS256 with this MAC); a signed one is decided only in exactly
// Sign's shape, any other goes to golang-jwt. Segments are decoded with
// base64.RawURLEncoding, golang-jwt's default decoder.

// maxFastToken bounds the tokens copied into pooled buffers (Sign's are
// under 200 bytes).
const maxFastToken = 512

// stdHeader is the header segment Sign produces, as golang-jwt encodes it.
var stdHeader = func() string {
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{}).SigningString()
	if err != nil {
		panic(err)
	}
	h, _, _ := strings.Cut(s, ".")
	return h
}()

// Rejections of the fast path, built once: a refusal allocates nothing.
var (
	errMalformed = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenMalformed)
	errSignature = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenSignatureInvalid)
	errExpired   = fmt.Errorf("%w: %w", ErrInvalidToken, jwt.ErrTokenExpired)
)

// scratch is a pooled working set: an HMAC keyed with the secret (Reset
// restores its pads) and buffers for the token and its decoded segments.
type scratch struct {
	mac    hash.Hash
	tok    []byte
	sum    [32]byte
	sig    [64]byte
	claims [192]byte
}

// load returns token as bytes, in the pooled buffer unless it is long.
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
	// golang-jwt's rules without leeway: exp strictly after now, truncated
	// to jwt.TimePrecision (Sign writes no nbf; iat is not checked).
	if !now.Before(time.Unix(exp, 0).Truncate(jwt.TimePrecision)) {
		return Principal{}, true, errExpired
	}
	return p, true, nil
}

// parseSignedClaims reads claims in exactly Sign's shape,
// {"role":"buyer","sub":"1001","exp":1700003600,"iat":1700000000}, else
// ok=false. It leaves JSON nothing to interpret, and the numbers are what
// golang-jwt reads: sub is a canonical positive int64 (18 digits at most);
// exp and iat have at most 15 digits, exact as float64s.
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
	var n [3]int64 // sub, exp, iat
	for i, f := range [...]struct {
		prefix string
		digits int
	}{{`","sub":"`, 18}, {`","exp":`, 15}, {`,"iat":`, 15}} {
		if b, ok = bytes.CutPrefix(b, []byte(f.prefix)); !ok {
			return Principal{}, 0, false
		}
		if n[i], b, ok = leadingNumber(b, f.digits); !ok {
			return Principal{}, 0, false
		}
	}
	if string(b) != "}" {
		return Principal{}, 0, false
	}
	p.UserID = n[0]
	return p, n[1], true
}

// leadingNumber reads 1 to maxDigits decimal digits, the first not 0.
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
