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
