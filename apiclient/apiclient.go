// Package apiclient is the typed HTTP client of the seckill API, generated
// from docs/openapi.yaml by oapi-codegen (client.gen.go; regenerate with
// `go generate ./apiclient`, the generator is pinned by go.mod's tool
// directive). TestClientMatchesDocument fails when the committed client is
// not the document's, so the document and its callers (the tests, the bench
// and the demo sale) cannot drift apart. The production binary does not link
// it.
package apiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml -o client.gen.go ../docs/openapi.yaml

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
)

// Bearer sends token as the request's bearer token.
func Bearer(token string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// New is a client of the API at server (its base URL, e.g.
// http://127.0.0.1:8080) sending requests through hc (nil:
// http.DefaultClient), every request with token as its bearer token unless
// token is "".
func New(server, token string, hc HttpRequestDoer) (*ClientWithResponses, error) {
	opts := []ClientOption{}
	if hc != nil {
		opts = append(opts, WithHTTPClient(hc))
	}
	if token != "" {
		opts = append(opts, WithRequestEditorFn(Bearer(token)))
	}
	return NewClientWithResponses(strings.TrimRight(server, "/"), opts...)
}

// Want returns err, or an error quoting the answer unless its status is one
// of want and, where the document gives that status a JSON body, the body
// was read into the response's JSON<status> field. r is a generated
// ...Response (its Body is the answer's bytes).
func Want(r interface{ StatusCode() int }, err error, want ...int) error {
	if err != nil {
		return err
	}
	res := reflect.Indirect(reflect.ValueOf(r))
	code := r.StatusCode()
	problem := ""
	if !slices.Contains(want, code) {
		problem = fmt.Sprintf("want %v", want)
	} else if f := res.FieldByName(fmt.Sprintf("JSON%d", code)); f.IsValid() && f.IsNil() {
		problem = "not the JSON answer the document describes"
	}
	if problem == "" {
		return nil
	}
	var method, url string
	if h, ok := res.FieldByName("HTTPResponse").Interface().(*http.Response); ok && h != nil && h.Request != nil {
		method, url = h.Request.Method, h.Request.URL.String()
	}
	return fmt.Errorf("%s %s: %d, %s: %s", method, url, code, problem, strings.TrimSpace(string(res.FieldByName("Body").Bytes())))
}
