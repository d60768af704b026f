// Package browser_test drives the storefront and the control room in a real
// headless Chromium (Debian's package, installed by scripts/stack browser) against
// child `seckill api` and `seckill worker` processes (and, for the checkout,
// the Stripe stand-in `seckill-stripe` or the test provider `seckill
// testpay`) on a private slice of the local stack. Screenshots of every step are saved under
// .stack/test-logs/browser/ (SECKILL_BROWSER_OUT overrides); with
// SECKILL_BROWSER_DOCS=1 the storefront's and the control room's are
// also copied to docs/ for the README.
package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/payment/provider/standin"
	"github.com/seckill/seckill/payment/provider/testpay"
	"github.com/seckill/seckill/testkit"
)

// chromiumPath finds the browser; without it the test skips, unless
// SECKILL_REQUIRE_BROWSER=1 (make test) makes that a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SECKILL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("SECKILL_REQUIRE_BROWSER") == "1" {
		t.Fatal("chromium not found (scripts/stack browser installs Debian's chromium)")
	}
	t.Skip("chromium not found: scripts/stack browser installs it (SECKILL_REQUIRE_BROWSER=1 makes this a failure)")
	return ""
}

// deployment is one API and one worker on a private database, Redis prefix,
// topic and task queue; with a provider, the provider's process too.
type deployment struct {
	t      *testing.T
	base   string // http://127.0.0.1:port
	secret []byte
	api    *apiclient.ClientWithResponses // of base
	// With a provider: its URL (its checkout pages), and the knobs.
	payURL   string
	setKnobs func(delay time.Duration) error
}

func deploy(t *testing.T) *deployment { return deployWith(t, "") }

// standinKey is the API key the browser tests' Stripe stand-in takes.
const standinKey = "sk_test_browser"

// deployWith deploys with provider (empty: door): stripe runs the Stripe
// stand-in (`seckill-stripe`, as make run does) and the API's production
// Stripe code against it; testpay runs `seckill testpay`. Their checkout
// pages send the buyer back to the storefront's order page.
func deployWith(t *testing.T, provider string) *deployment {
	t.Helper()
	bin := testkit.SeckillBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	s.Temporal(ctx, t, testkit.Logger(t))
	addr := testkit.FreeAddr(t)
	d := &deployment{t: t, base: "http://" + addr, secret: []byte(s.Config.JWTSecret.Value())}
	vars := []string{"SECKILL_DEV=1", "SECKILL_API_ADDR=" + addr, "SECKILL_WORKER_METRICS_ADDR=" + testkit.FreeAddr(t)}
	roles := []string{"worker", "api"}
	logs := t.TempDir()
	payAddr := testkit.FreeAddr(t)
	d.payURL = "http://" + payAddr
	notify, back := d.base+"/api/v1/payments/notifications", "SECKILL_PAYMENT_RETURN_URL="+d.base+"/#/orders/{order_id}"
	switch provider {
	case "testpay":
		vars = append(vars, "SECKILL_PAYMENT_PROVIDER=testpay", "SECKILL_PAYMENT_TESTPAY_ADDR="+payAddr,
			"SECKILL_PAYMENT_TESTPAY_URL="+d.payURL, "SECKILL_PAYMENT_TESTPAY_NOTIFY_URL="+notify, back)
		roles = append([]string{"testpay"}, roles...)
		tp := testpay.NewClient(d.payURL, config.DevTestpaySecret, nil)
		d.setKnobs = func(delay time.Duration) error { return tp.SetKnobs(context.Background(), testpay.Knobs{Delay: delay}) }
	case "stripe":
		vars = append(vars, "SECKILL_PAYMENT_PROVIDER=stripe", "SECKILL_PAYMENT_STRIPE_URL="+d.payURL, "SECKILL_PAYMENT_STRIPE_KEY="+standinKey,
			"SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET="+config.DevTestpaySecret, back)
		c := testkit.Start(t, proc.Spec{Path: testkit.StripeStandinBinary(t), Args: []string{"-addr", payAddr, "-url", d.payURL,
			"-webhook-url", notify, "-keys", standinKey}, Log: filepath.Join(logs, "seckill-stripe.log"), Banner: "browser test seckill-stripe"}, 10*time.Second)
		testkit.WaitHTTP(t, d.payURL+"/healthz", c, 30*time.Second)
		admin := standin.NewAdmin(d.payURL, standinKey, nil)
		d.setKnobs = func(delay time.Duration) error {
			return admin.SetKnobs(context.Background(), standin.Knobs{Delay: delay})
		}
	}
	env := s.Env(vars...)
	for _, role := range roles {
		c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{role}, Env: env, Log: filepath.Join(logs, role+".log"), Banner: "browser test " + role}, 20*time.Second)
		if role == "testpay" {
			testkit.WaitHTTP(t, d.payURL+"/healthz", c, 30*time.Second)
		}
	}
	d.api = testkit.Client(t, d.base)
	testkit.WaitHTTP(t, d.base+"/readyz", nil, 90*time.Second)
	return d
}

func (d *deployment) token(user int64, role auth.Role) string {
	d.t.Helper()
	return testkit.Token(d.t, d.secret, user, role)
}

// as makes an API call user's with role.
func (d *deployment) as(user int64, role auth.Role) apiclient.RequestEditorFn {
	d.t.Helper()
	return apiclient.Bearer(d.token(user, role))
}

func (d *deployment) createSale(name string, units int64, startIn time.Duration) apiclient.Item {
	d.t.Helper()
	start := time.Now().Add(startIn).UTC()
	window := 600
	res, err := d.api.CreateItemWithResponse(context.Background(), apiclient.CreateItem{Name: name, PriceCents: 1999, StockTotal: units,
		StartAt: start, EndAt: start.Add(time.Hour), PaymentTimeoutSeconds: &window}, d.as(1, auth.RoleAdmin))
	if err := apiclient.Want(res, err, http.StatusCreated); err != nil {
		d.t.Fatalf("create sale: %v", err)
	}
	return *res.JSON201
}

// browser is one headless Chromium; each page gets a browser context of its
// own (its own storage: one signed-in person per page).
type browser struct {
	t   *testing.T
	ctx context.Context
	out string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	exe := chromiumPath(t)
	out := os.Getenv("SECKILL_BROWSER_OUT")
	if out == "" {
		out = filepath.Join(testkit.RepoRoot(t), ".stack", "test-logs", "browser")
	}
	cleanOut.Do(func() { _ = os.RemoveAll(out) }) // once: every test's screenshots are kept
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	// The flags Chromium needs on these machines: no sandbox as root, no
	// GPU, and none of its own network traffic (the network is closed).
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-background-timer-throttling", true),
		chromedp.Flag("disable-renderer-backgrounding", true),
		chromedp.Flag("disable-backgrounding-occluded-windows", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	if err := chromedp.Do(bctx); err != nil { // starts the browser
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start chromium %s: %v", exe, err)
	}
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	t.Logf("screenshots: %s", out)
	return &browser{t: t, ctx: bctx, out: out}
}

// page is one tab in a browser context of its own.
type page struct {
	t    *testing.T
	name string
	ctx  context.Context
	out  string
}

func (b *browser) page(name string) *page {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx, chromedp.WithNewBrowserContext())
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		b.t.Fatalf("open tab %s: %v", name, err)
	}
	return &page{t: b.t, name: name, ctx: ctx, out: b.out}
}

// do runs browser actions, each step bounded so a broken page fails the
// test instead of hanging it.
func (p *page) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.shot("FAILED-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("%s: %s: %v", p.name, what, err)
	}
}

// until waits for a JavaScript condition to hold in the page. A poll that
// started in a document a navigation then replaced (on a busy machine, one
// started right after a Navigate) is started again in the new one.
func (p *page) until(what, cond string, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := time.Until(deadline)
		ctx, cancel := context.WithTimeout(p.ctx, left+5*time.Second)
		_, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(left)))
		cancel()
		if err == nil {
			return
		}
		if navigatedAway(err) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		p.shot("FAILED-" + strings.ReplaceAll(what, " ", "-"))
		p.t.Fatalf("%s: waiting for %s (%s): %v", p.name, what, cond, err)
	}
}

// navigatedAway tells an evaluation ended by a navigation from a failed one.
func navigatedAway(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed") || strings.Contains(msg, "Inspected target navigated or closed")
}

// across waits for a JavaScript condition through navigations, which end
// an evaluation: those tries are repeated.
func (p *page) across(what, cond string, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](cond))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			p.shot("FAILED-" + strings.ReplaceAll(what, " ", "-"))
			p.t.Fatalf("%s: waiting for %s (%s): %v", p.name, what, cond, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text returns the text of the element with the id.
func (p *page) text(id string) string {
	p.t.Helper()
	return p.eval(fmt.Sprintf(`(document.getElementById(%q)||{}).textContent||""`, id))
}

// eval evaluates expr, a JavaScript expression of a string, on the page.
func (p *page) eval(expr string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		p.t.Fatalf("%s: %s: %v", p.name, expr, err)
	}
	return s
}

// shot saves a full-page screenshot as NN-name.png in the output folder.
func (p *page) shot(name string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 20*time.Second)
	defer cancel()
	b, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("%s: screenshot %s: %v", p.name, name, err)
		return ""
	}
	shotMu.Lock()
	shotN++
	path := filepath.Join(p.out, fmt.Sprintf("%02d-%s.png", shotN, name))
	shotMu.Unlock()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot %s", path)
	return path
}

var (
	shotMu   sync.Mutex
	shotN    int
	cleanOut sync.Once
)

// js quotes a Go string for JavaScript.
func js(s string) string { b, _ := json.Marshal(s); return string(b) }

// toDocs copies a screenshot to docs/ (SECKILL_BROWSER_DOCS=1).
func toDocs(t *testing.T, src, name string) {
	t.Helper()
	if os.Getenv("SECKILL_BROWSER_DOCS") != "1" || src == "" {
		return
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(testkit.RepoRoot(t), "docs", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}
