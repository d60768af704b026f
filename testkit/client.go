package testkit

import (
	"net/http"
	"testing"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
)

// apiHTTP is the API clients' transport: an answer within 30 s.
var apiHTTP = &http.Client{Timeout: 30 * time.Second}

// Client is a client of the API at server (its base URL), generated from
// docs/openapi.yaml: a call carries no token unless it is given one (As),
// or the client was made with editors that add one (ClientAs).
func Client(t testing.TB, server string, editors ...apiclient.RequestEditorFn) *apiclient.ClientWithResponses {
	t.Helper()
	opts := []apiclient.ClientOption{apiclient.WithHTTPClient(apiHTTP)}
	for _, e := range editors {
		opts = append(opts, apiclient.WithRequestEditorFn(e))
	}
	c, err := apiclient.NewClientWithResponses(server, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ClientAs is a client of the API at server whose every call is user's
// with role: it carries a token signed with secret (As).
func ClientAs(t testing.TB, server string, secret []byte, user int64, role auth.Role) *apiclient.ClientWithResponses {
	t.Helper()
	return Client(t, server, As(t, secret, user, role))
}

// As makes a call user's with role: its bearer token, signed with secret,
// is valid for an hour.
func As(t testing.TB, secret []byte, user int64, role auth.Role) apiclient.RequestEditorFn {
	t.Helper()
	return apiclient.Bearer(Token(t, secret, user, role))
}

// Token is a token for user with role signed with secret, valid for an
// hour.
func Token(t testing.TB, secret []byte, user int64, role auth.Role) string {
	t.Helper()
	tok, err := auth.Sign(secret, user, role, time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
