package apiclient

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The committed client is what the go:generate line makes of
// docs/openapi.yaml today: regenerated into a temporary directory, it is
// the same file. A change to the document that is not regenerated (or a
// hand edit of client.gen.go) fails here.
func TestClientMatchesDocument(t *testing.T) {
	src, err := os.ReadFile("apiclient.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for l := range strings.Lines(string(src)) {
		if rest, ok := strings.CutPrefix(l, "//go:generate "); ok {
			args = strings.Fields(rest)
		}
	}
	o := slices.Index(args, "-o")
	if len(args) < 3 || args[0] != "go" || args[1] != "tool" || o < 0 || o+1 >= len(args) {
		t.Fatalf("apiclient.go's go:generate line is not `go tool oapi-codegen ... -o FILE ...`: %q", args)
	}
	committed := args[o+1]
	args[o+1] = filepath.Join(t.TempDir(), committed)
	cmd := exec.Command(args[0], args[1:]...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
	want, err := os.ReadFile(args[o+1])
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("apiclient/%s is not what docs/openapi.yaml generates: run go generate ./apiclient and commit it", committed)
	}
}

// New's client sends its token on every call and Want quotes an answer of
// another status.
func TestNewSendsTheTokenAndWantQuotesTheAnswer(t *testing.T) {
	var auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth = r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"ORDER_NOT_FOUND","message":"no such order"}}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/", "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.GetOrderWithResponse(context.Background(), "01J0000000000000000000000A")
	if auth != "Bearer tok" {
		t.Errorf("Authorization = %q, want Bearer tok", auth)
	}
	if err != nil || res.JSON404 == nil || res.JSON404.Error.Code != "ORDER_NOT_FOUND" {
		t.Fatalf("GetOrder = %+v, %v; want a parsed 404", res, err)
	}
	err = Want(res, err, http.StatusOK)
	if err == nil || !strings.Contains(err.Error(), "GET "+srv.URL+"/api/v1/orders/01J0000000000000000000000A: 404") ||
		!strings.Contains(err.Error(), "no such order") {
		t.Errorf("Want = %v; want the method, URL, status and body", err)
	}
	if Want(res, nil, http.StatusNotFound) != nil {
		t.Error("Want refused the status it was given")
	}
	res.JSON404 = nil
	if err := Want(res, nil, http.StatusNotFound); err == nil || !strings.Contains(err.Error(), "not the JSON answer") {
		t.Errorf("Want of a 404 whose body was not read = %v; want an error", err)
	}
}
