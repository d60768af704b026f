package config

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

// Every test parses an explicit environment: the machine's SECKILL_* (the
// stack's `scripts/stack env`, a developer's shell) must not change what a
// test sees.

func TestDefaultsMatchLocalStack(t *testing.T) {
	c, err := LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Addr != "127.0.0.1:6379" || c.MySQL.Port != 3306 || c.RocketMQ.Topic != "seckill-orders" ||
		c.RocketMQ.ConsumerGroup != "seckill-order-consumer" || c.Temporal.Address != "127.0.0.1:7233" {
		t.Fatalf("defaults drifted from the local stack: %+v", c)
	}
}

func TestEnvOverridesAndSecretsMasked(t *testing.T) {
	c, err := LoadFrom(map[string]string{
		"SECKILL_MYSQL_PASSWORD":   "hunter2",
		"SECKILL_JWT_SECRET":       "topsecret",
		"SECKILL_ROCKETMQ_NAMESRV": "10.0.0.1:9876,10.0.0.2:9876",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.MySQL.Password.Value() != "hunter2" || len(c.RocketMQ.NameServers) != 2 {
		t.Fatalf("env not applied: %+v", c)
	}
	s := c.String()
	if strings.Contains(s, "hunter2") || strings.Contains(s, "topsecret") {
		t.Fatalf("secret printed: %s", s)
	}
	if dsn, err := c.MySQL.DSN(); err != nil || !strings.Contains(dsn, "seckill:hunter2@tcp(127.0.0.1:3306)/seckill") {
		t.Fatalf("dsn: %s, %v", dsn, err)
	}
}

func TestBadValueIsAnError(t *testing.T) {
	if _, err := LoadFrom(map[string]string{"SECKILL_MYSQL_PORT": "not-a-port"}); err == nil {
		t.Fatal("want an error for a non-numeric port")
	}
}

// A bad value stops the process at start and names its variable.
func TestValidateNamesTheVariable(t *testing.T) {
	for name, value := range map[string]string{
		"SECKILL_REDIS_ADDR":              "no-port",
		"SECKILL_LOG_LEVEL":               "loud",
		"SECKILL_API_TRUSTED_PROXIES":     "10.0.0.0/8,not-a-cidr",
		"SECKILL_API_WAKE_RATE":           "0",
		"SECKILL_TEMPORAL_COMPRESSION":    "zstd",
		"SECKILL_WORKER_CONSUME_WORKERS":  "-1",
		"SECKILL_API_STREAMS_PER_BUYER":   "0",
		"SECKILL_API_IP_LIMITER_MAX_KEYS": "0",
		"SECKILL_ROCKETMQ_NAMESRV":        "127.0.0.1:9876,nameserver",
		"SECKILL_API_RELAY_PARALLEL":      "0",
		"SECKILL_WORKER_WORKFLOW_POLLERS": "1",
		"SECKILL_API_EVENTS_POLL":         "0s",
		"SECKILL_API_METRICS_ADDR":        "metrics",
		"SECKILL_REDIS_ADDRS":             "10.0.0.1:6379,node2",
		"SECKILL_PAYMENT_CURRENCY":        "eur",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := LoadFrom(map[string]string{name: value})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("err %v, want one naming %s", err, name)
			}
		})
	}
}

// Every check tag names a rule Validate applies: a misspelt one would check
// nothing.
func TestCheckTagsAreKnown(t *testing.T) {
	eachSetting(reflect.ValueOf(Config{}), Prefix, func(name string, f reflect.StructField, _ reflect.Value) {
		switch tag, _, _ := strings.Cut(f.Tag.Get("check"), "="); tag {
		case "", "positive", "hostport", "hostport,optional", "min", "oneof":
		default:
			t.Errorf("%s: unknown check tag %q", name, tag)
		}
	})
}

// Load reads the process environment, and only the SECKILL_* variables.
func TestLoadReadsTheProcessEnvironment(t *testing.T) {
	// A clean slate: the machine's SECKILL_* are unset for this test (t.Setenv
	// restores them afterwards).
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "SECKILL_") {
			t.Setenv(k, "")
			_ = os.Unsetenv(k)
		}
	}
	t.Setenv("SECKILL_REDIS_ADDR", "10.1.2.3:6380")
	t.Setenv("REDIS_ADDR", "10.9.9.9:1") // no prefix: not ours
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Addr != "10.1.2.3:6380" {
		t.Fatalf("redis addr %q, want the SECKILL_REDIS_ADDR value", c.Redis.Addr)
	}
}

// The API refuses the published development secret and short secrets,
// unless the development switch is on.
func TestCheckAPISecret(t *testing.T) {
	c := Config{JWTSecret: DevJWTSecret}
	if err := c.CheckAPISecret(); err == nil || !strings.Contains(err.Error(), "SECKILL_JWT_SECRET") {
		t.Fatalf("default secret accepted: %v", err)
	}
	c.JWTSecret = "short-secret"
	if err := c.CheckAPISecret(); err == nil {
		t.Fatal("short secret accepted")
	}
	c.JWTSecret = Secret(strings.Repeat("k", MinJWTSecretBytes))
	if err := c.CheckAPISecret(); err != nil {
		t.Fatalf("32-byte secret refused: %v", err)
	}
	c = Config{JWTSecret: DevJWTSecret, Dev: true}
	if err := c.CheckAPISecret(); err != nil {
		t.Fatalf("dev switch ignored: %v", err)
	}
}

// The development sign-in signs only with the published development
// secret: SECKILL_DEV=1 next to a real secret must not mint tokens that
// secret makes valid.
func TestDevTokenSecretOnlyWithTheDevelopmentSecret(t *testing.T) {
	strong := Secret(strings.Repeat("k", MinJWTSecretBytes))
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{JWTSecret: DevJWTSecret, Dev: true}, DevJWTSecret},
		{Config{JWTSecret: strong, Dev: true}, ""},
		{Config{JWTSecret: DevJWTSecret}, ""},
		{Config{JWTSecret: strong}, ""},
	} {
		if got := tc.c.DevTokenSecret(); string(got) != tc.want || (tc.want == "") != (got == nil) {
			t.Errorf("dev %v, secret %q: dev token secret %q, want %q", tc.c.Dev, tc.c.JWTSecret.Value(), got, tc.want)
		}
	}
}

// The order signing key defaults to the published development key, which
// (like a short key, current or previous) the API and the worker refuse
// unless the development switch is on; it is masked when printed.
func TestCheckOrderSigningKey(t *testing.T) {
	c, err := LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.RocketMQ.OrderSigningKey.Value() != DevOrderSigningKey {
		t.Fatalf("default key %q, want the development key", c.RocketMQ.OrderSigningKey.Value())
	}
	if err := c.CheckOrderSigningKey(); err == nil || !strings.Contains(err.Error(), "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY ") {
		t.Fatalf("default key accepted: %v", err)
	}
	if strings.Contains(c.String(), DevOrderSigningKey) {
		t.Fatal("the signing key is printed")
	}
	good := Secret(strings.Repeat("k", MinJWTSecretBytes))
	for _, tc := range []struct {
		current, previous Secret
		dev               bool
		refused           string // the variable named, or "" for accepted
	}{
		{current: good},
		{current: good, previous: Secret(strings.Repeat("p", MinJWTSecretBytes))},
		{current: "short-key", refused: "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY "},
		{current: good, previous: "short-key", refused: "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY_PREVIOUS"},
		{current: good, previous: DevOrderSigningKey, refused: "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY_PREVIOUS"},
		{current: DevOrderSigningKey, previous: "short", dev: true},
	} {
		c := Config{Dev: tc.dev, RocketMQ: RocketMQ{OrderSigningKey: tc.current, OrderSigningKeyPrevious: tc.previous}}
		err := c.CheckOrderSigningKey()
		if tc.refused == "" && err != nil || tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)) {
			t.Errorf("%+v: err %v, want refusal naming %q", tc, err, tc.refused)
		}
	}
}

// A comma list with spaces keeps every entry: "a, b" trusts b too (it was
// dropped), and a bad entry stops the load naming the variable.
func TestTrustedProxiesTrimmed(t *testing.T) {
	c, err := LoadFrom(map[string]string{"SECKILL_API_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.0.0/16 ,, 127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.168.0.0/16", "127.0.0.1"}
	if strings.Join(c.API.TrustedProxies, "|") != strings.Join(want, "|") {
		t.Fatalf("trusted proxies %q, want %q", c.API.TrustedProxies, want)
	}
	for _, bad := range []string{"10.0.0.0/8, 10.0.0.0/33", "10.0.0.0/8, lb.internal"} {
		_, err := LoadFrom(map[string]string{"SECKILL_API_TRUSTED_PROXIES": bad})
		if err == nil || !strings.Contains(err.Error(), "SECKILL_API_TRUSTED_PROXIES") {
			t.Fatalf("%q: err %v, want one naming SECKILL_API_TRUSTED_PROXIES", bad, err)
		}
	}
}

// A confirm window the write timeout cannot hold would end in a dropped
// connection instead of an answer: refused at load, naming the variable.
func TestConfirmTimeoutMustFitTheWriteTimeout(t *testing.T) {
	for _, tc := range []struct {
		confirm, write string
		ok             bool
	}{
		{"10s", "15s", true}, // the defaults
		{"12s", "15s", true},
		{"13s", "15s", false},
		{"20s", "15s", false},
		{"20s", "30s", true},
	} {
		_, err := LoadFrom(map[string]string{"SECKILL_API_CONFIRM_TIMEOUT": tc.confirm, "SECKILL_API_WRITE_TIMEOUT": tc.write})
		if tc.ok != (err == nil) || err != nil && !strings.Contains(err.Error(), "SECKILL_API_CONFIRM_TIMEOUT") {
			t.Fatalf("confirm %s, write %s: err %v, want ok=%v (an error naming SECKILL_API_CONFIRM_TIMEOUT)", tc.confirm, tc.write, err, tc.ok)
		}
	}
}

// `seckill config` prints a duration as its variable is written, so what an
// operator reads can be pasted back into SECKILL_*.
func TestStringPrintsDurations(t *testing.T) {
	c, err := LoadFrom(map[string]string{"SECKILL_MYSQL_PASSWORD": "hunter2", "SECKILL_RECONCILE_GRACE": "90s"})
	if err != nil {
		t.Fatal(err)
	}
	var printed struct {
		Redis     struct{ WaitTimeout any }
		MySQL     struct{ Password any }
		Reconcile struct{ Grace any }
		API       struct{ Relay struct{ Linger any } }
	}
	if err := json.Unmarshal([]byte(c.String()), &printed); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, c)
	}
	if printed.Redis.WaitTimeout != "100ms" || printed.Reconcile.Grace != "1m30s" || printed.API.Relay.Linger != "200ms" {
		t.Fatalf("durations printed as %v, %v, %v; want 100ms, 1m30s, 200ms", printed.Redis.WaitTimeout, printed.Reconcile.Grace, printed.API.Relay.Linger)
	}
	if printed.MySQL.Password != "******" {
		t.Fatalf("password printed as %v", printed.MySQL.Password)
	}
	if i, j := strings.Index(c.String(), `"Log"`), strings.Index(c.String(), `"Redis"`); i < 0 || i > j {
		t.Fatalf("sections out of declaration order:\n%s", c)
	}
}

// With an identity provider and no SECKILL_JWT_SECRET the API takes no HS256
// token (no published default is put in its place); OIDC needs an audience
// and http(s) URLs.
func TestOIDCSettings(t *testing.T) {
	c, err := LoadFrom(map[string]string{"SECKILL_AUTH_OIDC_ISSUER": "https://login.shop.example/realms/shop", "SECKILL_AUTH_OIDC_AUDIENCE": "seckill"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Auth.OIDC.On() || c.JWTSecret != "" || c.Auth.OIDC.BuyerClaim != "sub" || c.CheckAPISecret() != nil {
		t.Fatalf("OIDC without a shared secret: on %v, secret %q, buyer claim %q, check %v",
			c.Auth.OIDC.On(), c.JWTSecret.Value(), c.Auth.OIDC.BuyerClaim, c.CheckAPISecret())
	}
	if c, _ := LoadFrom(nil); c.Auth.OIDC.On() || c.JWTSecret != DevJWTSecret {
		t.Fatal("the defaults turn OIDC on or leave no shared secret")
	}
	for _, env := range []map[string]string{
		{"SECKILL_AUTH_OIDC_ISSUER": "https://login.shop.example"},
		{"SECKILL_AUTH_OIDC_JWKS_URL": "login.shop.example/jwks", "SECKILL_AUTH_OIDC_AUDIENCE": "seckill"},
		{"SECKILL_AUTH_OIDC_ISSUER": "ftp://login.shop.example", "SECKILL_AUTH_OIDC_AUDIENCE": "seckill"},
	} {
		if _, err := LoadFrom(env); err == nil {
			t.Errorf("%v loaded", env)
		}
	}
}

func TestWorkflowsURL(t *testing.T) {
	tm := Temporal{UIURL: "http://ui:8233", Namespace: "shop a"}
	for query, want := range map[string]string{
		"":                     "http://ui:8233/namespaces/shop%20a/workflows",
		`WorkflowId="order-1"`: "http://ui:8233/namespaces/shop%20a/workflows?query=WorkflowId%3D%22order-1%22",
	} {
		if got := tm.WorkflowsURL(query); got != want {
			t.Errorf("WorkflowsURL(%q) = %q, want %q", query, got, want)
		}
	}
	if got := (Temporal{Namespace: "default"}).WorkflowsURL("x"); got != "" {
		t.Errorf("without a UI: %q", got)
	}
}

// The provider name is read in any case and spacing and used lower-case, so
// no rule is skipped by a capital letter; a real provider without its
// secrets, the stand-ins (testpay, a Stripe URL not Stripe's) and the
// published development secret refuse to start outside development, naming
// the variable and the fix.
func TestPaymentFailsClosed(t *testing.T) {
	env := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	const (
		provider  = "SECKILL_PAYMENT_PROVIDER"
		key       = "SECKILL_PAYMENT_STRIPE_KEY"
		secret    = "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET"
		previous  = "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET_PREVIOUS"
		stripeURL = "SECKILL_PAYMENT_STRIPE_URL"
		mock      = "http://127.0.0.1:12111" // stripe-mock
	)
	for _, tc := range []struct {
		name     string
		env      map[string]string
		refused  string // the variable named ("" for loaded), and with it the fix
		provider string // the name loaded
	}{
		{name: "Stripe without its key", env: env(provider, "Stripe"), refused: key},
		{name: "Stripe without its signing secret", env: env(provider, "Stripe", key, "sk_test_x"), refused: key},
		{name: "spaced upper case", env: env(provider, " STRIPE ", key, "sk_test_x", secret, "whsec_x"), provider: "stripe"},
		{name: "testpay", env: env(provider, "testpay"), refused: provider + ": testpay"},
		{name: "TestPay", env: env(provider, "TestPay"), refused: provider + ": testpay"},
		{name: "testpay in development", env: env(provider, "TestPay", "SECKILL_DEV", "1"), provider: "testpay"},
		{name: "stripe-mock", env: env(provider, "stripe", key, "sk_test_x", secret, "whsec_x", stripeURL, mock), refused: stripeURL},
		{name: "stripe-mock in development", env: env(provider, "stripe", key, "sk_test_x", secret, "whsec_x", stripeURL, mock, "SECKILL_DEV", "1"), provider: "stripe"},
		{name: "a Stripe URL on door", env: env(stripeURL, mock), refused: stripeURL},
		{name: "Stripe's URL", env: env(provider, "stripe", key, "sk_test_x", secret, "whsec_x", stripeURL, StripeAPIURL+"/"), provider: "stripe"},
		{name: "the published secret", env: env(provider, "stripe", key, "sk_test_x", secret, DevTestpaySecret), refused: secret + " "},
		{name: "the published secret as the previous one", env: env(provider, "stripe", key, "sk_test_x", secret, "whsec_x", previous, DevTestpaySecret), refused: previous},
		{name: "the published secret in development", env: env(provider, "stripe", key, "sk_test_x", secret, DevTestpaySecret, "SECKILL_DEV", "1"), provider: "stripe"},
		{name: "a rotation", env: env(provider, "stripe", key, "sk_test_x", secret, "whsec_new", previous, "whsec_old"), provider: "stripe"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadFrom(tc.env)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused == "":
				if c.Payment.Provider != tc.provider {
					t.Fatalf("provider %q, want %q", c.Payment.Provider, tc.provider)
				}
			case err == nil || !strings.Contains(err.Error(), tc.refused):
				t.Fatalf("err %v, want a refusal naming %q", err, tc.refused)
			case tc.refused != key && !strings.Contains(err.Error(), "SECKILL_DEV=1 on a development machine"):
				t.Fatalf("err %v: says not how to fix it", err)
			}
		})
	}
	// The guard's default rate follows the normalised name.
	if c, err := LoadFrom(map[string]string{provider: "TESTPAY", "SECKILL_DEV": "1"}); err != nil || c.Payment.GuardRPS() != 1000 {
		t.Fatalf("TESTPAY: %v, guard rate %v, want 1000", err, c.Payment.GuardRPS())
	}
}

// The events signing key defaults to the published development key, which
// a publishing worker refuses unless the development switch is on; a key
// or a public key that is not Ed25519's refuses to load; the published
// keys default to the signing key's own.
func TestEventsSigningKey(t *testing.T) {
	c, err := LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckEventsSigningKey(); err == nil || !strings.Contains(err.Error(), "SECKILL_EVENTS_SIGNING_KEY") {
		t.Fatalf("the development key accepted outside SECKILL_DEV: %v", err)
	}
	if strings.Contains(c.String(), DevEventsSigningKey) {
		t.Fatal("the events signing key is printed")
	}
	keys, err := c.Events.EventKeys()
	if err != nil || len(keys) != 1 {
		t.Fatalf("published keys %v %v, want the signing key's", keys, err)
	}
	c.Dev = true
	if err := c.CheckEventsSigningKey(); err != nil {
		t.Fatalf("the development key refused with SECKILL_DEV: %v", err)
	}
	for name, env := range map[string]map[string]string{
		"SECKILL_EVENTS_SIGNING_KEY": {"SECKILL_EVENTS_SIGNING_KEY": "c2hvcnQ="},
		"SECKILL_EVENTS_PUBLIC_KEYS": {"SECKILL_EVENTS_PUBLIC_KEYS": base64.StdEncoding.EncodeToString(keys[0]) + ",bm90IGEga2V5"},
	} {
		if _, err := LoadFrom(env); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: %v, want a refusal naming %s", env, err, name)
		}
	}
}
