package config

import (
	"strings"
	"testing"
)

func TestDefaultsMatchLocalStack(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.Redis.Addr != "127.0.0.1:6379" || c.MySQL.Port != 3306 || c.RocketMQ.Topic != "seckill-orders" ||
		c.RocketMQ.ConsumerGroup != "seckill-order-consumer" || c.Temporal.Address != "127.0.0.1:7233" {
		t.Fatalf("defaults drifted from the local stack: %+v", c)
	}
}

func TestEnvOverridesAndSecretsMasked(t *testing.T) {
	t.Setenv("SECKILL_MYSQL_PASSWORD", "hunter2")
	t.Setenv("SECKILL_JWT_SECRET", "topsecret")
	t.Setenv("SECKILL_ROCKETMQ_NAMESRV", "10.0.0.1:9876,10.0.0.2:9876")
	c, err := Load()
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
	if !strings.Contains(c.MySQL.DSN(), "seckill:hunter2@tcp(127.0.0.1:3306)/seckill") {
		t.Fatalf("dsn: %s", c.MySQL.DSN())
	}
}

func TestBadValueIsAnError(t *testing.T) {
	t.Setenv("SECKILL_MYSQL_PORT", "not-a-port")
	if _, err := Load(); err == nil {
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
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			_, err := Load()
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("err %v, want one naming %s", err, name)
			}
		})
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
