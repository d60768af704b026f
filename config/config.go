// Package config holds the typed configuration of every seckill role. It is
// parsed once in main from SECKILL_* environment variables and passed down;
// no other package reads the environment.
package config

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
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

// Config is the whole configuration; each role uses the sections it needs.
type Config struct {
	Log       Log       `envPrefix:"LOG_"`
	Redis     Redis     `envPrefix:"REDIS_"`
	MySQL     MySQL     `envPrefix:"MYSQL_"`
	RocketMQ  RocketMQ  `envPrefix:"ROCKETMQ_"`
	Temporal  Temporal  `envPrefix:"TEMPORAL_"`
	API       API       `envPrefix:"API_"`
	Worker    Worker    `envPrefix:"WORKER_"`
	Reconcile Reconcile `envPrefix:"RECONCILE_"`
	// JWTSecret signs and verifies buyer and admin tokens (HS256). Its
	// default is the well-known DevJWTSecret (set by normalize): `seckill
	// api` refuses to start with it (or any secret under 32 bytes) unless Dev.
	JWTSecret Secret `env:"JWT_SECRET"`
	// Dev is the development switch (SECKILL_DEV=1): it lets `seckill api`
	// run with the development JWT secret. `make run`, the tests, the bench
	// and docker-compose turn it on; nothing else should.
	Dev bool `env:"DEV"`
}

// DevJWTSecret is the default JWT secret, published in this repository:
// anyone can mint admin tokens with it.
const DevJWTSecret = "seckill-dev-secret-change-me"

// MinJWTSecretBytes is the shortest JWT secret the API accepts outside
// development (HS256 wants at least the hash's 32 bytes).
const MinJWTSecretBytes = 32

// CheckAPISecret refuses a JWT secret an attacker could know or guess,
// unless the development switch is on.
func (c Config) CheckAPISecret() error {
	if c.Dev {
		return nil
	}
	switch secret := c.JWTSecret.Value(); {
	case secret == DevJWTSecret:
		return fmt.Errorf("SECKILL_JWT_SECRET is the published development secret: set a random secret of at least %d bytes "+
			"(e.g. openssl rand -hex 32), or SECKILL_DEV=1 on a development machine", MinJWTSecretBytes)
	case len(secret) < MinJWTSecretBytes:
		return fmt.Errorf("SECKILL_JWT_SECRET is %d bytes: use at least %d (e.g. openssl rand -hex 32)", len(secret), MinJWTSecretBytes)
	}
	return nil
}

// Log configures log/slog.
type Log struct {
	Level  string `env:"LEVEL" envDefault:"info" check:"oneof=debug|info|warn|error"`
	Format string `env:"FORMAT" envDefault:"text" check:"oneof=text|json"`
}

// Logger is the process's logger, writing to w: the binaries' one way to
// read Level and Format.
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
	Addr string `env:"ADDR" envDefault:"127.0.0.1:6379" check:"hostport"`
	// Addrs, when set, replaces Addr: two or more addresses (the seed nodes
	// of a Redis Cluster) give a cluster client; one keeps the plain client
	// unless Cluster is on (a cluster behind one configuration endpoint).
	Addrs   []string `env:"ADDRS" envSeparator:"," check:"hostport,optional"`
	Cluster bool     `env:"CLUSTER"`
	// MasterName, when set, is the Sentinel master's name and Addrs (or
	// Addr) the Sentinels: a failover client.
	MasterName string `env:"SENTINEL_MASTER"`
	// Username and Password log in to Redis (ACL user; no username is the
	// default user); SentinelUsername and SentinelPassword to the Sentinels.
	Username         string `env:"USERNAME"`
	Password         Secret `env:"PASSWORD"`
	SentinelUsername string `env:"SENTINEL_USERNAME"`
	SentinelPassword Secret `env:"SENTINEL_PASSWORD"`
	// TLS to every node (and Sentinel); see TLSFiles.
	TLS      bool     `env:"TLS"`
	TLSFiles TLSFiles `envPrefix:"TLS_"`
	DB       int      `env:"DB" envDefault:"0"`
	PoolSize int      `env:"POOL_SIZE" envDefault:"64" check:"positive"`
	// KeyPrefix namespaces every key and channel (tests use their own).
	KeyPrefix string `env:"KEY_PREFIX" envDefault:"seckill"`
	// WaitReplicas > 0 answers a batch of reservations only once that many
	// replicas hold it (Redis WAIT, at most WaitTimeout; past it the batch
	// stands, counted): replication is asynchronous, and a failover could
	// promote a replica without the reservations buyers were told about.
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
	// TLS verifies the server's certificate and name (verify-full); see TLSFiles.
	TLS      bool     `env:"TLS"`
	TLSFiles TLSFiles `envPrefix:"TLS_"`
}

// DSN is the go-sql-driver/mysql data source name. With TLS it registers
// the TLS settings with the driver, under a name derived from them so that
// two configurations in one process do not overwrite each other's.
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
	// Brokers are the brokers' addresses (a comma list), used to create
	// topics (on every one of them) and by /readyz; producers and consumers
	// find brokers through the name servers.
	Brokers       []string `env:"BROKER" envDefault:"127.0.0.1:10911" envSeparator:"," check:"hostport"`
	Topic         string   `env:"TOPIC" envDefault:"seckill-orders"`
	ProducerGroup string   `env:"PRODUCER_GROUP" envDefault:"seckill-api"`
	ConsumerGroup string   `env:"CONSUMER_GROUP" envDefault:"seckill-order-consumer"`
	// MaxReconsume is how often a failing message is redelivered before it
	// goes to the consumer group's dead-letter topic.
	MaxReconsume int32 `env:"MAX_RECONSUME" envDefault:"16"`
	// AccessKey and SecretKey: the broker's ACL 2.0 user every client signs
	// with (empty: no ACL). It creates topics (the dead-letter one), so it
	// needs Create besides Pub and Sub.
	AccessKey string `env:"ACCESS_KEY"`
	SecretKey Secret `env:"SECRET_KEY"`
}

// Temporal runs the order saga.
type Temporal struct {
	Address   string `env:"ADDRESS" envDefault:"127.0.0.1:7233" check:"hostport"`
	Namespace string `env:"NAMESPACE" envDefault:"default"`
	TaskQueue string `env:"TASK_QUEUE" envDefault:"seckill-orders"`
	UIURL     string `env:"UI_URL" envDefault:"http://127.0.0.1:8233"`
	// Compression of gRPC requests to the frontend: "none" or "gzip". On
	// loopback or a LAN gzip only burns CPU on both ends; across a WAN
	// (Temporal Cloud) choose gzip.
	Compression string `env:"COMPRESSION" envDefault:"none" check:"oneof=none|gzip"`
	// TLS to the frontend (Temporal Cloud, a cluster with mTLS); see TLSFiles.
	TLS      bool     `env:"TLS"`
	TLSFiles TLSFiles `envPrefix:"TLS_"`
	// APIKey authenticates to Temporal Cloud with an API key (implies TLS).
	APIKey Secret `env:"API_KEY"`
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
	// GlobalRPS and GlobalBurst bound the purchase attempts one instance lets
	// through to Redis; the rest get 429 at once.
	GlobalRPS   float64 `env:"GLOBAL_RPS" envDefault:"20000" check:"positive"`
	GlobalBurst int     `env:"GLOBAL_BURST" envDefault:"5000"`
	// ConfirmTimeout is how long a purchase whose reservation's outcome is
	// unknown (a timeout, a Redis master dying) asks Redis whether the unit
	// was taken before answering 503. Above the Redis failover time, a unit
	// taken on the old master and replicated is answered 202 by the new one.
	// With PurchaseHeadroom it must fit in WriteTimeout (Validate).
	ConfirmTimeout time.Duration `env:"CONFIRM_TIMEOUT" envDefault:"10s" check:"positive"`
	BuyerRPS       float64       `env:"BUYER_RPS" envDefault:"5" check:"positive"`
	BuyerBurst     int           `env:"BUYER_BURST" envDefault:"10"`
	// AdminRPS and AdminBurst are each admin token's own limiter (item
	// creation, warm-up, end, stock): a script that sets up a hundred sales
	// back to back fits in the burst.
	AdminRPS   float64 `env:"ADMIN_RPS" envDefault:"50" check:"positive"`
	AdminBurst int     `env:"ADMIN_BURST" envDefault:"300" check:"positive"`
	IPRPS      float64 `env:"IP_RPS" envDefault:"50" check:"positive"`
	IPBurst    int     `env:"IP_BURST" envDefault:"100"`
	// LimiterIdleTTL is how long an idle per-buyer or per-IP limiter is kept.
	LimiterIdleTTL time.Duration `env:"LIMITER_IDLE_TTL" envDefault:"2m"`
	LimiterMaxKeys int           `env:"LIMITER_MAX_KEYS" envDefault:"1000000" check:"positive"`
	// IPLimiterMaxKeys bounds the per-IP limiters (IPv6 keyed by /64; a full
	// shard evicts one): memory stays bounded whatever the addresses.
	IPLimiterMaxKeys int `env:"IP_LIMITER_MAX_KEYS" envDefault:"100000" check:"positive"`
	// TrustedProxies are the CIDRs (or addresses) of load balancers from
	// which X-Forwarded-For is believed. Empty: the peer address is the client's.
	TrustedProxies []string `env:"TRUSTED_PROXIES" envSeparator:","`
	// StreamsPerBuyer and StreamsMax cap the open order event streams (SSE)
	// of one buyer and of the instance; past them a stream is 429.
	StreamsPerBuyer int `env:"STREAMS_PER_BUYER" envDefault:"4" check:"positive"`
	StreamsMax      int `env:"STREAMS_MAX" envDefault:"10000" check:"positive"`
	// EventsPoll is how often an open event stream re-reads its order (in
	// case a pub/sub message was lost) and sends a keep-alive; EventsMax
	// bounds how long one stream stays open.
	EventsPoll  time.Duration `env:"EVENTS_POLL" envDefault:"5s" check:"positive"`
	EventsMax   time.Duration `env:"EVENTS_MAX" envDefault:"1h" check:"positive"`
	ItemRefresh time.Duration `env:"ITEM_REFRESH" envDefault:"1s" check:"positive"`
	// Relay moves this instance's reservations from the outbox to RocketMQ.
	Relay Relay `envPrefix:"RELAY_"`
	// WakeRate paces, per instance, the signals that wake a saga after a pay
	// or cancel was recorded at the door (payment.Options.WakeRate).
	WakeRate float64 `env:"WAKE_RATE" envDefault:"25" check:"positive"`
	// EarlyPay makes an order payable (and cancellable) from its 202, while
	// QUEUED. The rolling-upgrade switch: on only once every API and worker
	// knows paid_at (see docs/deploy.md).
	EarlyPay bool `env:"EARLY_PAY" envDefault:"true"`
	// Instance names this API instance (its outbox consumer); empty means
	// hostname-pid. Two live instances must not share a name.
	Instance string `env:"INSTANCE"`
	// MemoryLimitMB is the soft memory limit in MiB (0: none; GOMEMLIMIT
	// wins). The default fits a sale of 100,000 buyers (~36 MB live heap);
	// raise it for many more, or the collector runs all the time.
	MemoryLimitMB int `env:"MEMORY_LIMIT_MB" envDefault:"112"`
	// MetricsAddr, when set, serves /metrics on its own listener instead of
	// the public one (where it is rate limited: a scrape a second, bursts of 10).
	MetricsAddr string `env:"METRICS_ADDR" check:"hostport,optional"`
	// PprofAddr, when set, serves net/http/pprof on its own listener (for
	// profiling under load; keep it on loopback). Empty: off.
	PprofAddr string `env:"PPROF_ADDR"`
}

// Relay is the API's outbox relay (package relay): every field is required.
type Relay struct {
	// Batch is how many outbox entries one read takes.
	Batch int `env:"BATCH" envDefault:"1024" check:"positive"`
	// ClaimAfter is how long an entry stays unacknowledged by another
	// instance before this one takes it over (that one is presumed dead).
	ClaimAfter time.Duration `env:"CLAIM_AFTER" envDefault:"10s" check:"positive"`
	// Parallel sends per item in flight, each of up to SendBatch outbox
	// entries (one RocketMQ batch message): together they bound the
	// duplicates a crash of this instance can cause (512).
	Parallel  int `env:"PARALLEL" envDefault:"1" check:"positive"`
	SendBatch int `env:"SEND_BATCH" envDefault:"512" check:"positive"`
	// Linger is how long the relay waits after a short read, so that its
	// next send carries a fuller batch: the broker's CPU goes per send, not
	// per message (docs/performance.md). It adds at most this to 202 -> deducted.
	Linger time.Duration `env:"LINGER" envDefault:"200ms"`
	// FlushTimeout bounds the outbox flush at shutdown.
	FlushTimeout time.Duration `env:"FLUSH_TIMEOUT" envDefault:"10s" check:"positive"`
	// PoolSize is the relay's own Redis pool (per node on a cluster): one
	// blocking reader per item on sale plus its acks.
	PoolSize int `env:"POOL_SIZE" envDefault:"128" check:"positive"`
	// RetireAfter is how long after its sale ended an item's reader keeps
	// going before it stops with the outbox empty (each holds a connection).
	RetireAfter time.Duration `env:"RETIRE_AFTER" envDefault:"1m" check:"positive"`
	// Discover is how often the relay re-reads the item list.
	Discover time.Duration `env:"DISCOVER" envDefault:"5s" check:"positive"`
}

// PurchaseHeadroom is what SECKILL_API_WRITE_TIMEOUT must hold besides the
// confirm window: the reservation's own round trip (the API's Redis timeout,
// 2 s) and the write of the answer (1 s).
const PurchaseHeadroom = 3 * time.Second

// Worker runs the RocketMQ consumer and the Temporal worker.
type Worker struct {
	Consumer                bool `env:"CONSUMER" envDefault:"true"`
	Temporal                bool `env:"TEMPORAL" envDefault:"true"`
	ConsumeWorkers          int  `env:"CONSUME_WORKERS" envDefault:"32" check:"positive"`
	MaxConcurrentActivities int  `env:"MAX_CONCURRENT_ACTIVITIES" envDefault:"64" check:"positive"`
	// With every workflow-task slot busy an eager start is refused: 512
	// (with 8 pollers) took stage 3b's p99 202 -> PENDING_PAYMENT from 48.7 s
	// to 31.9 s. It and WorkflowPollers are at least the SDK's minimum, 2.
	MaxConcurrentWorkflowTasks   int    `env:"MAX_CONCURRENT_WORKFLOW_TASKS" envDefault:"512" check:"min=2"`
	MaxConcurrentLocalActivities int    `env:"MAX_CONCURRENT_LOCAL_ACTIVITIES" envDefault:"512" check:"positive"`
	MetricsAddr                  string `env:"METRICS_ADDR" envDefault:"127.0.0.1:9091" check:"hostport"`
	WorkflowPollers              int    `env:"WORKFLOW_POLLERS" envDefault:"8" check:"min=2"`
	ActivityPollers              int    `env:"ACTIVITY_POLLERS" envDefault:"2" check:"positive"`
	// DLQGroup consumes the order consumer group's dead-letter topic
	// (%DLQ%<RocketMQ.ConsumerGroup>) and starts the saga of each order in it.
	DLQGroup string `env:"DLQ_GROUP" envDefault:"seckill-dlq-handler"`
	// StickyCacheSize bounds the sagas the worker keeps cached between tasks
	// (the SDK's 10,000 when 0); the rest are replayed when they wake.
	StickyCacheSize int `env:"STICKY_CACHE_SIZE" envDefault:"2000"`
	// MemoryLimitMB is the worker's soft memory limit in MiB, as for the API.
	MemoryLimitMB int `env:"MEMORY_LIMIT_MB" envDefault:"150"`
	// EagerStart starts sagas with Temporal's eager workflow start when this
	// process also runs the saga worker (workflows.Client.WithEagerStart).
	EagerStart bool `env:"EAGER_START" envDefault:"true"`
	// StartTimeout bounds one saga start; past it the message is redelivered.
	StartTimeout time.Duration `env:"START_TIMEOUT" envDefault:"10s" check:"positive"`
}

// Reconcile is the worker's periodic drift check (seckill reconcile).
type Reconcile struct {
	// Interval between runs (0: off). Each run checks the items whose sale
	// is live or ended within Since.
	Interval time.Duration `env:"INTERVAL" envDefault:"1m"`
	Since    time.Duration `env:"SINCE" envDefault:"2h"`
	// Grace is how old a reservation or QUEUED order must be before its
	// missing pieces count as drift.
	Grace time.Duration `env:"GRACE" envDefault:"2m"`
	// Repair makes the periodic run repair what has one safe answer (each
	// repair re-checks its premise as it writes: safe during a sale); off,
	// it reports, logs and exports seckill_reconcile_drift.
	Repair bool `env:"REPAIR" envDefault:"true"`
}

// Load parses the environment once and validates it: a bad value, or a
// SECKILL_* variable that is not a setting (a misspelling), stops the process
// at start, naming it. Unset settings keep their defaults.
func Load() (Config, error) { return LoadFrom(env.ToMap(os.Environ())) }

// LoadFrom is Load on the given variables instead of the process
// environment (tests pass their own, so the machine's SECKILL_* cannot leak
// in). A nil map is an empty environment: every field keeps its default.
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

// normalize tidies list values as written by people ("a, b" is a and b, an
// empty entry is nothing) and gives the defaults a struct tag cannot.
func (c *Config) normalize() {
	c.API.TrustedProxies = trimList(c.API.TrustedProxies)
	if c.JWTSecret == "" {
		c.JWTSecret = DevJWTSecret
	}
	if c.API.Instance == "" {
		host, _ := os.Hostname()
		c.API.Instance = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
}

func trimList(in []string) []string {
	var out []string
	for _, v := range in {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// Validate checks the values every role relies on, naming the variable of
// each bad one. A field's check tag states its rule: positive (a number or
// duration above 0), min=N (an integer of at least N), oneof=a|b (one of the
// words, in any case) or hostport (the address, or each of the list, is
// host:port; with optional it may be empty). The rules that join fields
// follow.
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
	for _, p := range c.API.TrustedProxies {
		if _, _, err := net.ParseCIDR(p); err != nil && net.ParseIP(p) == nil {
			bad("API_TRUSTED_PROXIES", "%q is not a CIDR or an IP address", p)
		}
	}
	return errors.Join(errs...)
}

// String prints the configuration as JSON with every secret masked.
func (c Config) String() string {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Sprintf("config: %v", err)
	}
	return string(b)
}
