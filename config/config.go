// Package config holds the typed configuration of every seckill role, parsed
// once in main from SECKILL_* variables; no other package reads the environment.
package config

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/go-sql-driver/mysql"
)

// Secret is a string that never prints its value.
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "******"
}

// MarshalJSON masks the secret when the config is printed as JSON.
func (s Secret) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// Value returns the secret itself, for the one place that needs it.
func (s Secret) Value() string { return string(s) }

// Config is the whole configuration. README.md and docs/deploy.md document
// each setting; a comment here says why a value or rule is what it is.
type Config struct {
	Log       Log       `envPrefix:"LOG_"`
	Redis     Redis     `envPrefix:"REDIS_"`
	MySQL     MySQL     `envPrefix:"MYSQL_"`
	RocketMQ  RocketMQ  `envPrefix:"ROCKETMQ_"`
	Temporal  Temporal  `envPrefix:"TEMPORAL_"`
	API       API       `envPrefix:"API_"`
	Worker    Worker    `envPrefix:"WORKER_"`
	Reconcile Reconcile `envPrefix:"RECONCILE_"`
	Refunds   Refunds   `envPrefix:"REFUNDS_"`
	Events    Events    `envPrefix:"EVENTS_"`
	Payment   Payment   `envPrefix:"PAYMENT_"`
	Auth      Auth      `envPrefix:"AUTH_"`
	// DevJWTSecret when unset, unless OIDC is on: then unset turns HS256 off (normalize).
	JWTSecret Secret `env:"JWT_SECRET"`
	Dev       bool   `env:"DEV"`
}

// DevJWTSecret is the published default JWT secret: anyone can mint admin tokens with it.
const DevJWTSecret = "seckill-dev-secret-change-me"

// MinJWTSecretBytes is the shortest secret or key accepted outside development (HS256's 32).
const MinJWTSecretBytes = 32

// CheckAPISecret refuses a guessable JWT secret unless the development switch is on.
func (c Config) CheckAPISecret() error {
	if c.Dev || c.JWTSecret == "" && c.Auth.OIDC.On() {
		return nil
	}
	return checkKey("SECKILL_JWT_SECRET", c.JWTSecret.Value(), DevJWTSecret, "secret", "")
}

// checkKey refuses the variable name's key when it is dev or too short.
func checkKey(name, key, dev, what, same string) error {
	switch {
	case key == dev:
		return fmt.Errorf("%s is the published development %s: set a random %s of at least %d bytes%s "+
			"(e.g. openssl rand -hex 32), or SECKILL_DEV=1 on a development machine", name, what, what, MinJWTSecretBytes, same)
	case len(key) < MinJWTSecretBytes:
		return fmt.Errorf("%s is %d bytes: use at least %d (e.g. openssl rand -hex 32)", name, len(key), MinJWTSecretBytes)
	}
	return nil
}

// DevTokenSecret is the secret POST /api/v1/dev/token signs with: only with
// SECKILL_DEV=1 and the published secret, else nil (no such route).
func (c Config) DevTokenSecret() []byte {
	if !c.Dev || c.JWTSecret.Value() != DevJWTSecret {
		return nil
	}
	return []byte(DevJWTSecret)
}

// Auth is how the API knows its buyers besides SECKILL_JWT_SECRET's HS256 tokens.
type Auth struct {
	OIDC OIDC `envPrefix:"OIDC_"`
}

// OIDC points the API at a shop's identity provider (docs/shop.md): on when
// an issuer or a JWKS URL is set.
type OIDC struct {
	Issuer     string        `env:"ISSUER"`
	JWKSURL    string        `env:"JWKS_URL"`
	Audience   string        `env:"AUDIENCE"`
	BuyerClaim string        `env:"BUYER_CLAIM" envDefault:"sub"`
	AdminClaim string        `env:"ADMIN_CLAIM"` // empty: no admin signs in through the provider
	AdminValue string        `env:"ADMIN_VALUE" envDefault:"admin"`
	Refresh    time.Duration `env:"REFRESH" envDefault:"5m" check:"positive"`
	// A forged kid costs the provider at most one fetch per this.
	UnknownKIDRefresh time.Duration `env:"UNKNOWN_KID_REFRESH" envDefault:"10s" check:"positive"`
}

// On reports whether the API takes the provider's tokens.
func (o OIDC) On() bool { return o.Issuer != "" || o.JWKSURL != "" }

// Log configures log/slog.
type Log struct {
	Level  string `env:"LEVEL" envDefault:"info" check:"oneof=debug|info|warn|error"`
	Format string `env:"FORMAT" envDefault:"text" check:"oneof=text|json"`
}

// Logger is the process's logger, writing to w.
func (l Log) Logger(w io.Writer) *slog.Logger {
	var level slog.Level // info unless Level names another (Validate)
	_ = level.UnmarshalText([]byte(l.Level))
	opts := &slog.HandlerOptions{Level: level}
	if strings.EqualFold(l.Format, "json") {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// Redis is the stock and reservation store.
type Redis struct {
	Addr             string   `env:"ADDR" envDefault:"127.0.0.1:6379" check:"hostport"`
	Addrs            []string `env:"ADDRS" envSeparator:"," check:"hostport,optional"` // replaces Addr when set
	Cluster          bool     `env:"CLUSTER"`
	MasterName       string   `env:"SENTINEL_MASTER"`
	Username         string   `env:"USERNAME"`
	Password         Secret   `env:"PASSWORD"`
	SentinelUsername string   `env:"SENTINEL_USERNAME"`
	SentinelPassword Secret   `env:"SENTINEL_PASSWORD"`
	TLS              bool     `env:"TLS"`
	TLSFiles         TLSFiles `envPrefix:"TLS_"`
	DB               int      `env:"DB" envDefault:"0"`
	PoolSize         int      `env:"POOL_SIZE" envDefault:"64" check:"positive"`
	KeyPrefix        string   `env:"KEY_PREFIX" envDefault:"seckill"`
	// Replication is asynchronous: a batch may wait for WaitReplicas (WAIT).
	WaitReplicas int           `env:"WAIT_REPLICAS" envDefault:"0" check:"min=0"`
	WaitTimeout  time.Duration `env:"WAIT_TIMEOUT" envDefault:"100ms"`
}

// Addresses are the Redis addresses to dial: Addrs when set, else Addr.
func (r Redis) Addresses() []string {
	if len(r.Addrs) > 0 {
		return r.Addrs
	}
	return []string{r.Addr}
}

// MySQL is the system of record (MariaDB in the local stack).
type MySQL struct {
	Host         string        `env:"HOST" envDefault:"127.0.0.1"`
	Port         int           `env:"PORT" envDefault:"3306" check:"min=1"`
	User         string        `env:"USER" envDefault:"seckill"`
	Password     Secret        `env:"PASSWORD" envDefault:"seckill"`
	Database     string        `env:"DATABASE" envDefault:"seckill"`
	MaxOpenConns int           `env:"MAX_OPEN_CONNS" envDefault:"32" check:"positive"`
	MaxIdleConns int           `env:"MAX_IDLE_CONNS" envDefault:"16"`
	ConnMaxLife  time.Duration `env:"CONN_MAX_LIFETIME" envDefault:"30m"`
	TLS          bool          `env:"TLS"` // verify-full
	TLSFiles     TLSFiles      `envPrefix:"TLS_"`
}

// DSN is the go-sql-driver/mysql data source name; TLS settings are
// registered under a name derived from them (one per configuration).
func (m MySQL) DSN() (string, error) {
	dsn := fmt.Sprintf("%s:%s@tcp(%s)/%s?charset=utf8mb4&interpolateParams=true&parseTime=true&loc=UTC&time_zone=%%27%%2B00%%3A00%%27&timeout=5s",
		m.User, m.Password.Value(), net.JoinHostPort(m.Host, strconv.Itoa(m.Port)), m.Database)
	t, err := m.TLSFiles.Client(m.TLS, "SECKILL_MYSQL_TLS")
	if err != nil || t == nil {
		return dsn, err
	}
	name := fmt.Sprintf("seckill-%x", sha256.Sum256([]byte(fmt.Sprintf("%#v", m.TLSFiles))))[:24]
	if err := mysql.RegisterTLSConfig(name, t); err != nil {
		return "", fmt.Errorf("SECKILL_MYSQL_TLS: %w", err)
	}
	return dsn + "&tls=" + name, nil
}

// RocketMQ is the order queue between the API and the saga.
type RocketMQ struct {
	NameServers []string `env:"NAMESRV" envDefault:"127.0.0.1:9876" envSeparator:"," check:"hostport"`
	// For topic creation and /readyz only: clients find brokers through the name servers.
	Brokers       []string `env:"BROKER" envDefault:"127.0.0.1:10911" envSeparator:"," check:"hostport"`
	Topic         string   `env:"TOPIC" envDefault:"seckill-orders"`
	ProducerGroup string   `env:"PRODUCER_GROUP" envDefault:"seckill-api"`
	ConsumerGroup string   `env:"CONSUMER_GROUP" envDefault:"seckill-order-consumer"`
	MaxReconsume  int32    `env:"MAX_RECONSUME" envDefault:"16"`
	// The ACL user creates the dead-letter topic: it needs Create besides Pub and Sub.
	AccessKey string `env:"ACCESS_KEY"`
	SecretKey Secret `env:"SECRET_KEY"`
	// The worker starts a saga only for a body signed with this key (or
	// Previous, for a rotation). DevOrderSigningKey when unset.
	OrderSigningKey         Secret `env:"ORDER_SIGNING_KEY"`
	OrderSigningKeyPrevious Secret `env:"ORDER_SIGNING_KEY_PREVIOUS"`
}

// DevOrderSigningKey is the published default order signing key.
const DevOrderSigningKey = "seckill-dev-order-signing-key-change-me"

// CheckOrderSigningKey refuses guessable signing keys unless the development switch is on.
func (c Config) CheckOrderSigningKey() error {
	if c.Dev {
		return nil
	}
	const same = ", the same on every API and worker"
	if err := checkKey("SECKILL_ROCKETMQ_ORDER_SIGNING_KEY", c.RocketMQ.OrderSigningKey.Value(), DevOrderSigningKey, "key", same); err != nil {
		return err
	}
	if prev := c.RocketMQ.OrderSigningKeyPrevious.Value(); prev != "" {
		return checkKey("SECKILL_ROCKETMQ_ORDER_SIGNING_KEY_PREVIOUS", prev, DevOrderSigningKey, "key", same)
	}
	return nil
}

// Temporal runs the order saga.
type Temporal struct {
	Address   string `env:"ADDRESS" envDefault:"127.0.0.1:7233" check:"hostport"`
	Namespace string `env:"NAMESPACE" envDefault:"default"`
	TaskQueue string `env:"TASK_QUEUE" envDefault:"seckill-orders"`
	UIURL     string `env:"UI_URL" envDefault:"http://127.0.0.1:8233"`
	// On loopback or a LAN gzip only burns CPU on both ends.
	Compression string   `env:"COMPRESSION" envDefault:"none" check:"oneof=none|gzip"`
	TLS         bool     `env:"TLS"`
	TLSFiles    TLSFiles `envPrefix:"TLS_"`
	APIKey      Secret   `env:"API_KEY"` // implies TLS
}

// WorkflowsURL is the Temporal Web UI's list of the namespace's workflows
// matching query (a visibility query; "" lists them all), or "" with no UI.
func (t Temporal) WorkflowsURL(query string) string {
	if t.UIURL == "" {
		return ""
	}
	u := t.UIURL + "/namespaces/" + url.PathEscape(t.Namespace) + "/workflows"
	if query != "" {
		u += "?query=" + url.QueryEscape(query)
	}
	return u
}

// API is the buyer-facing HTTP server.
type API struct {
	Addr              string        `env:"ADDR" envDefault:"127.0.0.1:8080" check:"hostport"`
	BodyLimitBytes    int64         `env:"BODY_LIMIT_BYTES" envDefault:"65536"`
	ReadHeaderTimeout time.Duration `env:"READ_HEADER_TIMEOUT" envDefault:"5s"`
	ReadTimeout       time.Duration `env:"READ_TIMEOUT" envDefault:"10s"`
	WriteTimeout      time.Duration `env:"WRITE_TIMEOUT" envDefault:"15s" check:"positive"`
	IdleTimeout       time.Duration `env:"IDLE_TIMEOUT" envDefault:"60s"`
	ShutdownTimeout   time.Duration `env:"SHUTDOWN_TIMEOUT" envDefault:"20s"`
	GlobalRPS         float64       `env:"GLOBAL_RPS" envDefault:"20000" check:"positive"`
	GlobalBurst       int           `env:"GLOBAL_BURST" envDefault:"5000"`
	// Above the Redis failover time; with PurchaseHeadroom within WriteTimeout.
	ConfirmTimeout time.Duration `env:"CONFIRM_TIMEOUT" envDefault:"10s" check:"positive"`
	BuyerRPS       float64       `env:"BUYER_RPS" envDefault:"5" check:"positive"`
	BuyerBurst     int           `env:"BUYER_BURST" envDefault:"10"`
	// Per admin token: a script setting up a hundred sales fits in the burst.
	AdminRPS       float64       `env:"ADMIN_RPS" envDefault:"50" check:"positive"`
	AdminBurst     int           `env:"ADMIN_BURST" envDefault:"300" check:"positive"`
	IPRPS          float64       `env:"IP_RPS" envDefault:"50" check:"positive"`
	IPBurst        int           `env:"IP_BURST" envDefault:"100"`
	LimiterIdleTTL time.Duration `env:"LIMITER_IDLE_TTL" envDefault:"2m"` // an idle buyer's or IP's limiter is dropped
	LimiterMaxKeys int           `env:"LIMITER_MAX_KEYS" envDefault:"1000000" check:"positive"`
	// IPv6 is keyed by /64 and a full shard evicts one: memory stays bounded.
	IPLimiterMaxKeys int           `env:"IP_LIMITER_MAX_KEYS" envDefault:"100000" check:"positive"`
	TrustedProxies   []string      `env:"TRUSTED_PROXIES" envSeparator:","`
	StreamsPerBuyer  int           `env:"STREAMS_PER_BUYER" envDefault:"4" check:"positive"`
	StreamsMax       int           `env:"STREAMS_MAX" envDefault:"10000" check:"positive"`
	EventsPoll       time.Duration `env:"EVENTS_POLL" envDefault:"5s" check:"positive"` // a pub/sub message may be lost
	EventsMax        time.Duration `env:"EVENTS_MAX" envDefault:"1h" check:"positive"`
	ItemRefresh      time.Duration `env:"ITEM_REFRESH" envDefault:"1s" check:"positive"`
	Relay            Relay         `envPrefix:"RELAY_"`
	WakeRate         float64       `env:"WAKE_RATE" envDefault:"25" check:"positive"`
	Instance         string        `env:"INSTANCE"` // hostname-pid when unset (normalize); unique among live instances
	// Fits a sale of 100,000 buyers (~36 MB live heap).
	MemoryLimitMB int    `env:"MEMORY_LIMIT_MB" envDefault:"112"`
	MetricsAddr   string `env:"METRICS_ADDR" check:"hostport,optional"`
	PprofAddr     string `env:"PPROF_ADDR"` // keep it on loopback
}

// Relay is the API's outbox relay (package relay): every field is required.
type Relay struct {
	Batch      int           `env:"BATCH" envDefault:"1024" check:"positive"`
	ClaimAfter time.Duration `env:"CLAIM_AFTER" envDefault:"10s" check:"positive"`
	// Parallel sends of up to SendBatch entries bound the duplicates a crash can cause.
	Parallel  int `env:"PARALLEL" envDefault:"1" check:"positive"`
	SendBatch int `env:"SEND_BATCH" envDefault:"512" check:"positive"`
	// The broker's CPU goes per send: after a short read wait up to Linger for a fuller batch.
	Linger       time.Duration `env:"LINGER" envDefault:"200ms"`
	FlushTimeout time.Duration `env:"FLUSH_TIMEOUT" envDefault:"10s" check:"positive"`
	// One blocking reader per item on sale plus its acks (per node on a cluster).
	PoolSize    int           `env:"POOL_SIZE" envDefault:"128" check:"positive"`
	RetireAfter time.Duration `env:"RETIRE_AFTER" envDefault:"1m" check:"positive"`
	Discover    time.Duration `env:"DISCOVER" envDefault:"5s" check:"positive"`
}

// APIRedisTimeout bounds the API's Redis dial, read and write.
const APIRedisTimeout = 2 * time.Second

// PurchaseHeadroom is the write timeout's share besides the confirm window.
const PurchaseHeadroom = APIRedisTimeout + time.Second

// Worker runs the RocketMQ consumer and the Temporal worker.
type Worker struct {
	Consumer                bool `env:"CONSUMER" envDefault:"true"`
	Temporal                bool `env:"TEMPORAL" envDefault:"true"`
	ConsumeWorkers          int  `env:"CONSUME_WORKERS" envDefault:"32" check:"positive"`
	MaxConcurrentActivities int  `env:"MAX_CONCURRENT_ACTIVITIES" envDefault:"64" check:"positive"`
	// With every slot busy an eager start is refused; the SDK's minimum is 2.
	MaxConcurrentWorkflowTasks   int           `env:"MAX_CONCURRENT_WORKFLOW_TASKS" envDefault:"512" check:"min=2"`
	MaxConcurrentLocalActivities int           `env:"MAX_CONCURRENT_LOCAL_ACTIVITIES" envDefault:"512" check:"positive"`
	MetricsAddr                  string        `env:"METRICS_ADDR" envDefault:"127.0.0.1:9091" check:"hostport"`
	WorkflowPollers              int           `env:"WORKFLOW_POLLERS" envDefault:"8" check:"min=2"`
	ActivityPollers              int           `env:"ACTIVITY_POLLERS" envDefault:"2" check:"positive"`
	DLQGroup                     string        `env:"DLQ_GROUP" envDefault:"seckill-dlq-handler"`
	StickyCacheSize              int           `env:"STICKY_CACHE_SIZE" envDefault:"2000"` // the SDK's 10,000 holds a whole sale's sagas
	MemoryLimitMB                int           `env:"MEMORY_LIMIT_MB" envDefault:"150"`
	EagerStart                   bool          `env:"EAGER_START" envDefault:"true"`
	StartTimeout                 time.Duration `env:"START_TIMEOUT" envDefault:"10s" check:"positive"`
}

// Reconcile is the worker's periodic drift check (seckill reconcile).
type Reconcile struct {
	Interval time.Duration `env:"INTERVAL" envDefault:"1m"` // 0: off
	Since    time.Duration `env:"SINCE" envDefault:"2h"`
	Grace    time.Duration `env:"GRACE" envDefault:"2m"`
	Repair   bool          `env:"REPAIR" envDefault:"true"` // safe during a sale: each repair re-checks its premise
}

// Refunds is the worker's driver of owed refunds (worker.RunRefunds).
type Refunds struct {
	Interval time.Duration `env:"INTERVAL" envDefault:"30s"` // 0: off
	// Idle: a refund row untouched this long has no saga or workflow
	// working on it (theirs retry at most a minute apart): the driver starts one.
	Idle time.Duration `env:"IDLE" envDefault:"2m" check:"positive"`
	// Grace: a refund owed longer than this is overdue (seckill_refunds_owed_overdue).
	Grace time.Duration `env:"GRACE" envDefault:"15m" check:"positive"`
	Batch int           `env:"BATCH" envDefault:"200" check:"positive"`
}

// Events is the worker's publisher of the order events outbox (docs/events.md).
type Events struct {
	Topic string `env:"TOPIC" envDefault:"seckill-order-events"`
	// Every worker may run it: one at a time holds the database's lease.
	Publish bool          `env:"PUBLISH" envDefault:"true"`
	Poll    time.Duration `env:"POLL" envDefault:"200ms" check:"positive"`
	Batch   int           `env:"BATCH" envDefault:"200" check:"positive"`
	// Orders whose events are sent side by side (one order's always in turn).
	Parallel int `env:"PARALLEL" envDefault:"8" check:"positive"`
	// SigningKey is the publisher's Ed25519 private key (its 32-byte seed,
	// base64): every event is signed with it (docs/events.md). Only the
	// workers that publish hold it. DevEventsSigningKey when unset, refused
	// outside SECKILL_DEV.
	SigningKey Secret `env:"SIGNING_KEY"`
	// PublicKeys are the public keys (base64, 32 bytes) GET
	// /api/v1/events/keys publishes for shops to verify with: the current
	// one, and during a rotation the one before it. Empty: the public key of
	// SigningKey (the development one, or a single box's).
	PublicKeys []string `env:"PUBLIC_KEYS" envSeparator:","`
}

// DevEventsSigningKey is the published development seed of the events
// signing key: a shop must never trust events signed with it.
const DevEventsSigningKey = "c2Vja2lsbC1kZXYtZXZlbnRzLWtleS1jaGFuZ2UtbWU="

// EventsSigningSeed is the events signing key's seed.
func (e Events) EventsSigningSeed() ([]byte, error) {
	seed, err := base64.StdEncoding.DecodeString(e.SigningKey.Value())
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, fmt.Errorf("SECKILL_EVENTS_SIGNING_KEY: not the base64 of a %d-byte Ed25519 seed (seckill events keygen makes one)", ed25519.SeedSize)
	}
	return seed, nil
}

// EventKeys are the public keys shops verify events with: PublicKeys, else
// the signing key's.
func (e Events) EventKeys() ([]ed25519.PublicKey, error) {
	if len(e.PublicKeys) == 0 {
		seed, err := e.EventsSigningSeed()
		if err != nil {
			return nil, err
		}
		return []ed25519.PublicKey{ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)}, nil
	}
	out := make([]ed25519.PublicKey, 0, len(e.PublicKeys))
	for _, k := range e.PublicKeys {
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(k))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("SECKILL_EVENTS_PUBLIC_KEYS: %q is not the base64 of a %d-byte Ed25519 public key", k, ed25519.PublicKeySize)
		}
		out = append(out, raw)
	}
	return out, nil
}

// CheckEventsSigningKey refuses to publish events with the published
// development key outside SECKILL_DEV: anyone could sign a PAID event then.
func (c Config) CheckEventsSigningKey() error {
	if _, err := c.Events.EventsSigningSeed(); err != nil {
		return err
	}
	if !c.Dev && c.Events.SigningKey.Value() == DevEventsSigningKey {
		return errors.New("SECKILL_EVENTS_SIGNING_KEY: the published development key: make one with `seckill events keygen`, " +
			"or SECKILL_DEV=1 on a development machine")
	}
	return nil
}

// Payment is the money side of a sale.
type Payment struct {
	// An item's when created without one (ISO 4217); the item table's column defaults to EUR too.
	Currency string `env:"CURRENCY" envDefault:"EUR"`
	// Provider takes the payments: door (the buyer's POST …/pay marks PAID,
	// no provider), testpay (development only) or stripe (checkout,
	// notifications, the saga cancels and refunds through it:
	// docs/payments.md). Lower-cased and trimmed once (normalize): every
	// rule and role compares it exactly.
	Provider string `env:"PROVIDER" envDefault:"door" check:"oneof=door|testpay|stripe"`
	// RPS bounds a process's calls to the provider, retries included
	// (provider.Guard); 0: the provider's default, 80 under stripe (Stripe
	// allows about 100 per account), 1000 under testpay.
	RPS       int     `env:"PROVIDER_RPS" envDefault:"0" check:"min=0"`
	ReturnURL string  `env:"RETURN_URL" envDefault:"http://127.0.0.1:8080/#/orders/{order_id}"`
	NotifyRPS float64 `env:"NOTIFY_RPS" envDefault:"2000" check:"positive"`
	Stripe    Stripe  `envPrefix:"STRIPE_"`
	Testpay   Testpay `envPrefix:"TESTPAY_"`
}

// GuardRPS is the provider calls per second a process makes (RPS); 0:
// provider.Guard's default.
func (p Payment) GuardRPS() float64 {
	if p.RPS == 0 && p.Provider == "testpay" {
		return 1000
	}
	return float64(p.RPS)
}

// Stripe is what SECKILL_PAYMENT_PROVIDER=stripe needs.
type Stripe struct {
	Key           Secret `env:"KEY"`            // sk_live_… / sk_test_…
	WebhookSecret Secret `env:"WEBHOOK_SECRET"` // whsec_…
	// A notification signed with this one is accepted too: a rotation
	// deploys the new secret beside the old before the endpoint rolls.
	WebhookSecretPrevious Secret `env:"WEBHOOK_SECRET_PREVIOUS"`
	// Empty: Stripe's API. Another (the Stripe stand-in, cmd/seckill-stripe,
	// which make run points it at; stripe-mock in tests) only with
	// SECKILL_DEV: it would take no real money.
	URL string `env:"URL"`
}

// StripeAPIURL is Stripe's own API, the one SECKILL_PAYMENT_STRIPE_URL may
// name outside development.
const StripeAPIURL = "https://api.stripe.com"

// Testpay is the built-in test provider (SECKILL_PAYMENT_PROVIDER=testpay):
// the `seckill testpay` role serves it on Addr (checkout pages and its
// API), the API and the worker reach it at URL, and it notifies NotifyURL.
type Testpay struct {
	Secret    Secret `env:"SECRET"` // DevTestpaySecret when unset
	Addr      string `env:"ADDR" envDefault:"127.0.0.1:8090" check:"hostport"`
	URL       string `env:"URL" envDefault:"http://127.0.0.1:8090"`
	NotifyURL string `env:"NOTIFY_URL" envDefault:"http://127.0.0.1:8080/api/v1/payments/notifications"`
}

// DevTestpaySecret signs the test provider's notifications when no secret is
// set: published here, as no real money moves through it (SECKILL_DEV only).
const DevTestpaySecret = "whsec_seckill_testpay_dev"

// Load parses and validates the environment, refusing unknown SECKILL_* variables.
func Load() (Config, error) { return LoadFrom(env.ToMap(os.Environ())) }

// LoadFrom is Load on the given variables (nil: none, every default).
func LoadFrom(environ map[string]string) (Config, error) {
	if environ == nil {
		environ = map[string]string{} // nil would make env fall back to os.Environ
	}
	if err := checkNames(environ); err != nil {
		return Config{}, err
	}
	var c Config
	if err := env.ParseWithOptions(&c, env.Options{Prefix: Prefix, Environment: environ}); err != nil {
		return Config{}, fmt.Errorf("parse SECKILL_* environment: %w", err)
	}
	c.normalize()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// normalize trims list entries and sets the defaults a struct tag cannot.
func (c *Config) normalize() {
	c.Payment.Provider = strings.ToLower(strings.TrimSpace(c.Payment.Provider))
	for i, p := range c.API.TrustedProxies {
		c.API.TrustedProxies[i] = strings.TrimSpace(p)
	}
	c.API.TrustedProxies = slices.DeleteFunc(c.API.TrustedProxies, func(p string) bool { return p == "" })
	if c.JWTSecret == "" && !c.Auth.OIDC.On() {
		c.JWTSecret = DevJWTSecret
	}
	if c.RocketMQ.OrderSigningKey == "" {
		c.RocketMQ.OrderSigningKey = DevOrderSigningKey
	}
	if c.Events.SigningKey == "" {
		c.Events.SigningKey = DevEventsSigningKey
	}
	if c.Payment.Testpay.Secret == "" {
		c.Payment.Testpay.Secret = DevTestpaySecret
	}
	if c.API.Instance == "" {
		host, _ := os.Hostname()
		c.API.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
}

// Validate checks every setting's check tag (positive, min=N, oneof=a|b,
// hostport[,optional]) and the rules that join fields.
func (c Config) Validate() error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("SECKILL_%s: %s", name, fmt.Sprintf(format, args...)))
	}
	eachSetting(reflect.ValueOf(c), "", func(name string, f reflect.StructField, v reflect.Value) {
		check, optional := strings.CutSuffix(f.Tag.Get("check"), ",optional")
		switch rule, arg, _ := strings.Cut(check, "="); rule {
		case "positive":
			if v.CanInt() && v.Int() <= 0 || v.CanFloat() && v.Float() <= 0 {
				bad(name, "must be positive, got %v", v.Interface())
			}
		case "min":
			if least, _ := strconv.ParseInt(arg, 10, 64); v.Int() < least {
				bad(name, "must be at least %d, got %d", least, v.Int())
			}
		case "oneof":
			if words := strings.Split(arg, "|"); !slices.Contains(words, strings.ToLower(v.String())) {
				bad(name, "%q: want one of %s", v.String(), strings.Join(words, ", "))
			}
		case "hostport":
			addrs, _ := v.Interface().([]string)
			if v.Kind() == reflect.String && v.String() != "" {
				addrs = []string{v.String()}
			}
			if len(addrs) == 0 && !optional {
				bad(name, "is empty: want host:port")
			}
			for _, a := range addrs {
				if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
					bad(name, "%q is not host:port", a)
				}
			}
		}
	})
	if c.Redis.WaitReplicas > 0 && c.Redis.WaitTimeout <= 0 {
		bad("REDIS_WAIT_TIMEOUT", "must be positive with SECKILL_REDIS_WAIT_REPLICAS, got %v", c.Redis.WaitTimeout)
	}
	if c.MySQL.Port > 65535 {
		bad("MYSQL_PORT", "%d is not a port", c.MySQL.Port)
	}
	if (c.RocketMQ.AccessKey == "") != (c.RocketMQ.SecretKey == "") {
		bad("ROCKETMQ_ACCESS_KEY", "ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY go together")
	}
	for name, f := range map[string]TLSFiles{"REDIS": c.Redis.TLSFiles, "MYSQL": c.MySQL.TLSFiles, "TEMPORAL": c.Temporal.TLSFiles} {
		if (f.Cert == "") != (f.Key == "") {
			bad(name+"_TLS_CERT", "SECKILL_%s_TLS_CERT and SECKILL_%s_TLS_KEY go together", name, name)
		}
	}
	if c.API.WriteTimeout > 0 && c.API.ConfirmTimeout+PurchaseHeadroom > c.API.WriteTimeout {
		bad("API_CONFIRM_TIMEOUT", "%s does not fit in SECKILL_API_WRITE_TIMEOUT %s: a purchase's answer needs the confirm window plus %s "+
			"(its reservation and the answer's write); lower it, or raise SECKILL_API_WRITE_TIMEOUT to at least %s",
			c.API.ConfirmTimeout, c.API.WriteTimeout, PurchaseHeadroom, c.API.ConfirmTimeout+PurchaseHeadroom)
	}
	if c.Payment.Provider == "stripe" && (c.Payment.Stripe.Key == "" || c.Payment.Stripe.WebhookSecret == "") {
		bad("PAYMENT_STRIPE_KEY", "SECKILL_PAYMENT_PROVIDER=stripe needs SECKILL_PAYMENT_STRIPE_KEY and SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET")
	}
	if !c.Dev {
		errs = append(errs, c.Payment.devOnly()...)
	}
	if _, err := c.Events.EventKeys(); err != nil {
		errs = append(errs, err)
	}
	if cur := c.Payment.Currency; len(cur) != 3 || strings.ContainsFunc(cur, func(r rune) bool { return r < 'A' || r > 'Z' }) {
		bad("PAYMENT_CURRENCY", "%q is not an ISO 4217 code: want three upper-case letters, e.g. EUR", cur)
	}
	if o := c.Auth.OIDC; o.On() {
		for name, u := range map[string]string{"AUTH_OIDC_ISSUER": o.Issuer, "AUTH_OIDC_JWKS_URL": o.JWKSURL} {
			if p, err := url.Parse(u); u != "" && (err != nil || p.Host == "" || p.Scheme != "https" && p.Scheme != "http") {
				bad(name, "%q is not an http(s) URL", u)
			}
		}
		if o.Audience == "" {
			bad("AUTH_OIDC_AUDIENCE", "is empty: an identity provider's tokens are taken only for this API's audience")
		}
	}
	for _, p := range c.API.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			bad("API_TRUSTED_PROXIES", "%q is not a CIDR or an IP address", p)
		}
	}
	return errors.Join(errs...)
}

// devOnly refuses what only a development machine may run: a deployment left
// on a stand-in "takes payments" nobody pays, and the books call them
// captured; anyone can sign a notification with a published secret.
func (p Payment) devOnly() []error {
	const dev = ", or SECKILL_DEV=1 on a development machine"
	var errs []error
	if p.Provider == "testpay" {
		errs = append(errs, errors.New("SECKILL_PAYMENT_PROVIDER: testpay is the test provider, whose payments nobody pays "+
			"and whose notifications a published secret may sign: set stripe (or door, no provider)"+dev))
	}
	if u := strings.TrimSuffix(p.Stripe.URL, "/"); u != "" && u != StripeAPIURL {
		errs = append(errs, fmt.Errorf("SECKILL_PAYMENT_STRIPE_URL: %q is not Stripe's API: leave it empty (%s)%s", p.Stripe.URL, StripeAPIURL, dev))
	}
	published := func(name string, s Secret) {
		if s.Value() == DevTestpaySecret {
			errs = append(errs, fmt.Errorf("%s is the published development secret: set the endpoint's signing secret "+
				"(whsec_…, from Stripe's dashboard)%s", name, dev))
		}
	}
	published("SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET", p.Stripe.WebhookSecret)
	published("SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET_PREVIOUS", p.Stripe.WebhookSecretPrevious)
	return errs
}

// String prints the configuration as JSON, secrets masked, durations as "100ms".
func (c Config) String() string {
	raw, err := printable(reflect.ValueOf(c))
	if err == nil {
		var b []byte
		if b, err = json.MarshalIndent(raw, "", "  "); err == nil {
			return string(b)
		}
	}
	return fmt.Sprintf("config: %v", err)
}

// printable is v as JSON, structs' fields in declaration order.
func printable(v reflect.Value) (json.RawMessage, error) {
	if d, ok := v.Interface().(time.Duration); ok {
		return json.Marshal(d.String())
	}
	if _, ok := v.Interface().(json.Marshaler); ok || v.Kind() != reflect.Struct {
		return json.Marshal(v.Interface())
	}
	b := []byte{'{'}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		value, err := printable(v.Field(i))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.Name, err)
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		name, _ := json.Marshal(f.Name)
		b = append(append(append(b, name...), ':'), value...)
	}
	return append(b, '}'), nil
}
