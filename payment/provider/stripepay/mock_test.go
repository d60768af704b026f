package stripepay_test

import (
	"bytes"
	"fmt"
	"github.com/seckill/seckill/testkit"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// mock is the stripe-mock process the package's tests share (stateless:
// it checks each request against Stripe's OpenAPI document and answers a
// fixture), started by the first test that needs it.
var mock struct {
	once sync.Once
	cmd  *exec.Cmd
	out  bytes.Buffer
	url  *url.URL
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if mock.cmd != nil {
		_ = mock.cmd.Process.Kill()
		_ = mock.cmd.Wait()
	}
	os.Exit(code)
}

// freeAddr is a loopback address no one listened on a moment ago.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String()
}

// stripeMock puts a recording proxy in front of stripe-mock, which can
// answer some requests itself (a 429, a 503, a state stripe-mock cannot
// hold). It skips under -short or without the binary, unless
// SECKILL_REQUIRE_STRIPE_MOCK=1 (make test): SECKILL_STRIPE_MOCK_BIN names
// it (scripts/test exports it), else stripe-mock on the PATH.
func stripeMock(t *testing.T) *proxy {
	t.Helper()
	bin := testkit.StripeMockBin(t)
	mock.once.Do(func() {
		addr := freeAddr(t)
		mock.cmd = exec.Command(bin, "-http-addr", addr, "-https-addr", freeAddr(t))
		mock.cmd.Stdout, mock.cmd.Stderr = &mock.out, &mock.out
		if mock.err = mock.cmd.Start(); mock.err != nil {
			mock.cmd = nil
			return
		}
		mock.url, _ = url.Parse("http://" + addr)
		for deadline := time.Now().Add(20 * time.Second); ; {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				_ = c.Close()
				return
			}
			if time.Now().After(deadline) {
				mock.err = fmt.Errorf("stripe-mock did not listen on %s: %w", addr, err)
				return
			}
			time.Sleep(50 * time.Millisecond) // polling for the child to listen
		}
	})
	if mock.err != nil {
		t.Fatalf("%v\n%s", mock.err, mock.out.String())
	}
	p := &proxy{mock: httputil.NewSingleHostReverseProxy(mock.url)}
	p.srv = httptest.NewServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

// request is one request the client sent.
type request struct {
	Method, Path, IdempotencyKey string
	Form                         url.Values
	Query                        url.Values
	Answer                       int // the status it got
}

// canned is an answer the proxy gives instead of stripe-mock's.
type canned struct {
	status int
	body   string
}

type proxy struct {
	mock *httputil.ReverseProxy
	srv  *httptest.Server

	mu     sync.Mutex
	canned []canned // answered in turn, before stripe-mock answers again
	log    []request
}

func (p *proxy) URL() string { return p.srv.URL }

// answer queues canned answers for the next requests.
func (p *proxy) answer(cs ...canned) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.canned = append(p.canned, cs...)
}

func (p *proxy) requests() []request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]request(nil), p.log...)
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(string(body))
	r.Body = io.NopCloser(bytes.NewReader(body))
	req := request{Method: r.Method, Path: r.URL.Path, IdempotencyKey: r.Header.Get("Idempotency-Key"), Form: form, Query: r.URL.Query()}
	p.mu.Lock()
	var c *canned
	if len(p.canned) > 0 {
		c = &p.canned[0]
		p.canned = p.canned[1:]
	}
	p.mu.Unlock()
	rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	if c != nil {
		rec.Header().Set("Content-Type", "application/json")
		rec.WriteHeader(c.status)
		_, _ = io.WriteString(rec, c.body)
	} else {
		p.mock.ServeHTTP(rec, r)
	}
	req.Answer = rec.status
	p.mu.Lock()
	p.log = append(p.log, req)
	p.mu.Unlock()
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}
