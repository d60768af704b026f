package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	testSecret = []byte("fast-path-secret")
	t0         = time.Unix(1_700_000_000, 0)
)

// mint signs header.claims (both already encoded) with HMAC over newHash.
func mint(newHash func() hash.Hash, key []byte, header, claims string) string {
	m := hmac.New(newHash, key)
	m.Write([]byte(header + "." + claims))
	return header + "." + claims + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func raw(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// padded encodes JSON s with '=' padding, adding spaces until padding shows.
func padded(s string) string {
	for len(s)%3 == 0 {
		s += " "
	}
	return base64.URLEncoding.EncodeToString([]byte(s))
}

const (
	hs256 = `{"alg":"HS256","typ":"JWT"}`
	hs512 = `{"alg":"HS512","typ":"JWT"}`
)

// claimsAt is Sign's claims shape with exp and iat relative to t0.
func claimsAt(role string, sub string, expIn, iatIn int64) string {
	return fmt.Sprintf(`{"role":%q,"sub":%q,"exp":%d,"iat":%d}`, role, sub, t0.Unix()+expIn, t0.Unix()+iatIn)
}

// decide runs both paths at now: Verify (fast path, golang-jwt fallback) and
// golang-jwt alone.
func decide(token string, now time.Time) (fast Principal, fastErr error, decided bool, ref Principal, refErr error) {
	v := NewVerifier(testSecret)
	v.now = func() time.Time { return now }
	fast, fastErr = v.Verify(token)
	st := v.scratch.Get().(*scratch)
	_, decided, _ = v.verifyFast(st.load(token), now, st)
	ref, refErr = v.verifyReference(token)
	return fast, fastErr, decided, ref, refErr
}

func TestVerifyFastPathAgreesWithGolangJWT(t *testing.T) {
	signed, err := Sign(testSecret, 1001, RoleAdmin, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	h := raw(hs256)
	good := func(c string) string { return mint(sha256.New, testSecret, h, raw(c)) }
	cases := []struct {
		name   string
		token  string
		accept bool
		fast   bool // decided without golang-jwt
	}{
		{"Sign's token", signed, true, true},
		{"buyer", good(claimsAt("buyer", "7", 60, 0)), true, true},
		{"18-digit sub", good(claimsAt("buyer", "123456789012345678", 60, 0)), true, true},
		{"19-digit sub", good(claimsAt("buyer", "1234567890123456789", 60, 0)), true, false},
		{"expired", good(claimsAt("buyer", "7", -1, -3600)), false, true},
		{"exp == now", good(claimsAt("buyer", "7", 0, -3600)), false, true},
		{"iat in the future (not checked)", good(claimsAt("buyer", "7", 60, 30)), true, true},
		{"nbf in the future", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"nbf":%d}`, t0.Unix()+60, t0.Unix()+30)), false, false},
		{"nbf past", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"nbf":%d}`, t0.Unix()+60, t0.Unix()-30)), true, false},
		{"no exp", good(`{"role":"buyer","sub":"7"}`), false, false},
		{"exp null", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":null,"iat":%d}`, t0.Unix())), false, false},
		{"fractional exp", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d.5}`, t0.Unix())), false, false},
		{"exp as a quoted number", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":"%d"}`, t0.Unix()+60)), true, false},
		{"exp leading zero", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":0%d,"iat":1}`, t0.Unix()+60)), false, false},
		{"non-canonical sub", good(claimsAt("buyer", "007", 60, 0)), false, false},
		{"signed sub", good(claimsAt("buyer", "+7", 60, 0)), false, false},
		{"zero sub", good(claimsAt("buyer", "0", 60, 0)), false, false},
		{"overflow sub", good(claimsAt("buyer", "99999999999999999999", 60, 0)), false, false},
		{"unknown role", good(claimsAt("root", "7", 60, 0)), false, false},
		{"escaped role", good(strings.Replace(claimsAt("buyer", "7", 60, 0), "buyer", `\u0062uyer`, 1)), true, false},
		{"upper-case keys", good(fmt.Sprintf(`{"ROLE":"buyer","Sub":"7","EXP":%d}`, t0.Unix()+60)), true, false},
		{"duplicate role", good(fmt.Sprintf(`{"role":"admin","sub":"7","exp":%d,"role":"buyer"}`, t0.Unix()+60)), true, false},
		{"extra claims", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"jti":"x","aud":"api"}`, t0.Unix()+60)), true, false},
		{"aud not a string", good(fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"aud":5}`, t0.Unix()+60)), false, false},
		{"trailing space", good(claimsAt("buyer", "7", 60, 0) + " "), true, false},
		{"header whitespace", mint(sha256.New, testSecret, raw(`{ "alg": "HS256" }`), raw(claimsAt("buyer", "7", 60, 0))), true, false},
		{"header reordered", mint(sha256.New, testSecret, raw(`{"typ":"JWT","alg":"HS256"}`), raw(claimsAt("buyer", "7", 60, 0))), true, false},
		{"HS512 header, HS256 MAC", mint(sha256.New, testSecret, raw(hs512), raw(claimsAt("buyer", "7", 60, 0))), false, false},
		{"HS512", mint(sha512.New, testSecret, raw(hs512), raw(claimsAt("buyer", "7", 60, 0))), false, true},
		{"alg none", raw(`{"alg":"none","typ":"JWT"}`) + "." + raw(claimsAt("buyer", "7", 60, 0)) + ".", false, true},
		{"bad signature", mint(sha256.New, []byte("other"), h, raw(claimsAt("buyer", "7", 60, 0))), false, true},
		{"padded claims", mint(sha256.New, testSecret, h, padded(claimsAt("buyer", "7", 60, 0))), false, false},
		{"padded signature", signed + "=", false, true},
		{"newline in claims", mint(sha256.New, testSecret, h, raw(claimsAt("buyer", "7", 60, 0))[:10]+"\n"+raw(claimsAt("buyer", "7", 60, 0))[10:]), true, true},
		{"std alphabet", strings.NewReplacer("-", "+", "_", "/").Replace(signed), false, true},
		{"four segments", signed + ".x", false, true},
		{"two segments", "a.b", false, true},
		{"garbage", "%%%%", false, true},
		{"empty", "", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fast, fastErr, decided, ref, refErr := decide(tc.token, t0)
			if (fastErr == nil) != tc.accept || (refErr == nil) != tc.accept {
				t.Fatalf("want accept=%v: fast path %v, golang-jwt %v", tc.accept, fastErr, refErr)
			}
			if fast != ref {
				t.Fatalf("principals differ: fast path %+v, golang-jwt %+v", fast, ref)
			}
			if fastErr != nil && !errors.Is(fastErr, ErrInvalidToken) {
				t.Fatalf("error does not wrap ErrInvalidToken: %v", fastErr)
			}
			if decided != tc.fast {
				t.Fatalf("decided by the fast path: %v, want %v", decided, tc.fast)
			}
		})
	}
}

// FuzzVerifyMatchesGolangJWT holds Verify to golang-jwt's answers. Random
// tokens almost never carry a valid MAC, so most modes sign what the fuzzer
// writes: it explores headers, claims and encodings behind valid signatures.
func FuzzVerifyMatchesGolangJWT(f *testing.F) {
	exp := t0.Unix() + 60
	headers := []string{hs256, hs512, `{"alg":"none"}`, `{"alg":"RS256","typ":"JWT"}`, `{"typ":"JWT","alg":"HS256"}`,
		`{ "alg" : "HS256" }`, `{"alg":"HS256","typ":"JWT","kid":"k"}`, `{"alg":"HS256","alg":"none"}`, `null`, `[]`}
	claims := []string{
		claimsAt("buyer", "7", 60, 0), claimsAt("admin", "1001", 3600, -10), claimsAt("buyer", "7", 0, 0),
		claimsAt("buyer", "7", -1, 0), claimsAt("buyer", "007", 60, 0), claimsAt("buyer", "+7", 60, 0),
		claimsAt("buyer", "0", 60, 0), claimsAt("buyer", "-7", 60, 0), claimsAt("buyer", "123456789012345678", 60, 0),
		claimsAt("buyer", "9223372036854775807", 60, 0), claimsAt("buyer", "9223372036854775808", 60, 0),
		claimsAt("root", "7", 60, 0), claimsAt("Buyer", "7", 60, 0), claimsAt("buyer", "7", 60, 600),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"nbf":%d}`, exp, exp-30),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"nbf":%d}`, exp, exp-90),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d.999999}`, t0.Unix()),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%de0}`, exp),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":"%d"}`, exp),
		`{"role":"buyer","sub":"7","exp":1e300}`, `{"role":"buyer","sub":"7","exp":-1}`,
		`{"role":"buyer","sub":"7","exp":null}`, `{"role":"buyer","sub":"7"}`, `null`, `[]`, `{}`,
		fmt.Sprintf(`{"role":"\u0062uyer","sub":"\u0037","exp":%d}`, exp),
		fmt.Sprintf(`{"ROLE":"buyer","ſub":"7","Exp":%d}`, exp),
		fmt.Sprintf(`{"role":"admin","sub":"7","exp":%d,"role":"buyer","sub":"8"}`, exp),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"jti":"x","iss":"y","aud":["a"]}`, exp),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"aud":5}`, exp),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d,"iat":"soon"}`, exp),
		fmt.Sprintf(` {"role":"buyer","sub":"7","exp":%d} `, exp),
		fmt.Sprintf(`{"role":"buyer","sub":"7","exp":%d}{}`, exp),
	}
	for mode := range uint8(8) {
		for _, h := range headers[:3] {
			for _, c := range claims {
				f.Add(h, c, mode, int64(0))
			}
		}
		f.Add(hs256, claims[0], mode, int64(59_999_999_999))
		f.Add(hs256, claims[0], mode, int64(60_000_000_000))
		f.Add(hs256, claims[0], mode, int64(-1))
	}
	for _, h := range headers[3:] {
		f.Add(h, claims[0], uint8(0), int64(0))
	}
	signed, _ := Sign(testSecret, 1001, RoleBuyer, time.Hour, t0)
	for _, tok := range []string{signed, signed + "=", signed + ".", signed[:len(signed)-1], "not.a.jwt", "%%%%", "", "..", " " + signed} {
		f.Add(tok, "", uint8(2), int64(0))
	}

	f.Fuzz(func(t *testing.T, header, claims string, mode uint8, nowOff int64) {
		var token string
		switch mode % 8 {
		case 0: // signed with our secret
			token = mint(sha256.New, testSecret, raw(header), raw(claims))
		case 1: // signed with another secret
			token = mint(sha256.New, []byte("other"), raw(header), raw(claims))
		case 2: // the whole token as written
			token = header
		case 3: // segments as written, signed with our secret: any base64 text
			token = mint(sha256.New, testSecret, header, claims)
		case 4: // padded base64, signed over the padded text
			token = mint(sha256.New, testSecret,
				base64.URLEncoding.EncodeToString([]byte(header)), base64.URLEncoding.EncodeToString([]byte(claims)))
		case 5: // signed, then the signature segment extended
			token = mint(sha256.New, testSecret, raw(header), raw(claims)) + claims
		case 6: // line breaks inside the claims segment, signed over them
			c := raw(claims)
			i := len(header) % (len(c) + 1)
			token = mint(sha256.New, testSecret, raw(header), c[:i]+"\r\n"+c[i:])
		case 7: // HS512 with our secret
			token = mint(sha512.New, testSecret, raw(header), raw(claims))
		}
		now := t0.Add(time.Duration(nowOff))
		fast, fastErr, _, ref, refErr := decide(token, now)
		if (fastErr == nil) != (refErr == nil) || fast != ref {
			t.Fatalf("token %q at %v:\nfast path %+v %v\ngolang-jwt %+v %v", token, now, fast, fastErr, ref, refErr)
		}
		if fastErr != nil && !errors.Is(fastErr, ErrInvalidToken) {
			t.Fatalf("error does not wrap ErrInvalidToken: %v", fastErr)
		}
	})
}

// TestVerifyConcurrent shares one verifier (its pooled MACs and buffers)
// among goroutines, each checking that it gets its own principals back.
func TestVerifyConcurrent(t *testing.T) {
	v := NewVerifier(testSecret)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				user := int64(g*1000 + i + 1)
				tok, err := Sign(testSecret, user, RoleBuyer, time.Hour, time.Now())
				if err != nil {
					t.Error(err)
					return
				}
				if p, err := v.Verify(tok); err != nil || p.UserID != user {
					t.Errorf("user %d: %+v %v", user, p, err)
					return
				}
				i := strings.LastIndexByte(tok, '.') + 1
				c := "A" // the first character carries 6 bits of the MAC: any change breaks it
				if tok[i] == 'A' {
					c = "B"
				}
				forged := tok[:i] + c + tok[i+1:]
				if _, err := v.Verify(forged); err == nil {
					t.Errorf("user %d: forged token accepted", user)
					return
				}
			}
		})
	}
	wg.Wait()
}
