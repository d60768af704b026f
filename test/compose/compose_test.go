// Package compose keeps docker-compose.yml from drifting away from the local
// stack (scripts/stack) and the config defaults: same ports, database, user,
// topic, consumer group, search attributes and broker settings.
package compose

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/testkit"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     any               `yaml:"command"`
		Ports       []string          `yaml:"ports"`
		Environment map[string]string `yaml:"environment"`
	} `yaml:"services"`
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func load(t *testing.T) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("docker-compose.yml does not parse: %v", err)
	}
	return c
}

// stackEnv runs `scripts/stack env`: the local stack's own view of its ports and names.
func stackEnv(t *testing.T) map[string]string {
	t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot(t), "scripts/stack"), "env")
	cmd.Env = withoutSeckillEnv()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("scripts/stack env: %v", err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env
}

func withoutSeckillEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SECKILL_") {
			env = append(env, kv)
		}
	}
	return env
}

func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://"))
	if err != nil {
		t.Fatalf("address %q: %v", addr, err)
	}
	return p
}

func TestComposeMatchesLocalStack(t *testing.T) {
	c := load(t)
	env := stackEnv(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	publishes := func(service, p string) {
		t.Helper()
		s, ok := c.Services[service]
		if !ok {
			t.Fatalf("service %s missing from docker-compose.yml", service)
		}
		want := "127.0.0.1:" + p + ":" + p
		if !slices.Contains(s.Ports, want) {
			t.Errorf("service %s publishes %v, want %s (the local stack's port)", service, s.Ports, want)
		}
	}
	publishes("redis", port(t, env["SECKILL_REDIS_ADDR"]))
	publishes("mariadb", env["SECKILL_MYSQL_PORT"])
	publishes("rocketmq-namesrv", port(t, env["SECKILL_ROCKETMQ_NAMESRV"]))
	publishes("rocketmq-broker", port(t, env["SECKILL_ROCKETMQ_BROKER"]))
	publishes("temporal", port(t, env["SECKILL_TEMPORAL_ADDRESS"]))
	publishes("temporal", port(t, env["SECKILL_TEMPORAL_UI_URL"]))
	publishes("api", port(t, cfg.API.Addr))

	// The stack's values, the config defaults and compose must all agree.
	if env["SECKILL_REDIS_ADDR"] != cfg.Redis.Addr || env["SECKILL_MYSQL_DATABASE"] != cfg.MySQL.Database ||
		env["SECKILL_MYSQL_USER"] != cfg.MySQL.User || env["SECKILL_TEMPORAL_ADDRESS"] != cfg.Temporal.Address {
		t.Errorf("scripts/stack env %v disagrees with the config defaults %+v", env, cfg)
	}
	db := c.Services["mariadb"].Environment
	if db["MARIADB_DATABASE"] != env["SECKILL_MYSQL_DATABASE"] || db["MARIADB_USER"] != env["SECKILL_MYSQL_USER"] ||
		db["MARIADB_PASSWORD"] != env["SECKILL_MYSQL_PASSWORD"] {
		t.Errorf("compose database/user %v, local stack %s/%s", db, env["SECKILL_MYSQL_DATABASE"], env["SECKILL_MYSQL_USER"])
	}
	for _, role := range []string{"api", "worker", "migrate"} {
		e := c.Services[role].Environment
		if e["SECKILL_MYSQL_DATABASE"] != cfg.MySQL.Database || e["SECKILL_MYSQL_USER"] != cfg.MySQL.User ||
			e["SECKILL_ROCKETMQ_TOPIC"] != cfg.RocketMQ.Topic || e["SECKILL_ROCKETMQ_CONSUMER_GROUP"] != cfg.RocketMQ.ConsumerGroup {
			t.Errorf("service %s environment %v disagrees with the defaults", role, e)
		}
	}

	// The API signs order messages and the worker accepts only what the same
	// key signs: one key for both, one they start with.
	api, worker := c.Services["api"].Environment, c.Services["worker"].Environment
	if k := api["SECKILL_ROCKETMQ_ORDER_SIGNING_KEY"]; k == "" || k != worker["SECKILL_ROCKETMQ_ORDER_SIGNING_KEY"] {
		t.Errorf("api and worker order signing keys %q and %q: want one key set for both", k, worker["SECKILL_ROCKETMQ_ORDER_SIGNING_KEY"])
	}
	for role, e := range map[string]map[string]string{"api": api, "worker": worker} {
		if rc, err := config.LoadFrom(e); err != nil {
			t.Errorf("service %s: %v", role, err)
		} else if err := rc.CheckOrderSigningKey(); err != nil {
			t.Errorf("service %s would refuse to start: %v", role, err)
		}
	}

	init := flatten(c.Services["rocketmq-init"].Command)
	if !strings.Contains(init, "-t "+cfg.RocketMQ.Topic+" ") || !strings.Contains(init, "-g "+cfg.RocketMQ.ConsumerGroup) {
		t.Errorf("rocketmq-init does not create topic %s and group %s: %s", cfg.RocketMQ.Topic, cfg.RocketMQ.ConsumerGroup, init)
	}
	temporal := flatten(c.Services["temporal"].Command)
	for _, sa := range []string{"SeckillItemId=Int", "SeckillUserId=Int", "SeckillOrderStatus=Keyword"} {
		if !strings.Contains(temporal, sa) {
			t.Errorf("temporal does not register search attribute %s", sa)
		}
	}
	// The dynamic config of the local dev server (scripts/lib/stack-services.sh).
	if !strings.Contains(temporal, "--dynamic-config-value=system.enableActivityEagerExecution=true") {
		t.Errorf("temporal does not enable eager activity execution: %s", temporal)
	}
	if r := flatten(c.Services["redis"].Command); !strings.Contains(r, "--appendonly yes") || !strings.Contains(r, "--appendfsync everysec") {
		t.Errorf("redis is not AOF every second: %s", r)
	}
}

// TestBrokerConfMatchesLocalStack compares the compose broker.conf with the
// one scripts/stack wrote, key by key (addresses and paths excepted).
func TestBrokerConfMatchesLocalStack(t *testing.T) {
	testkit.Integration(t) // the local file exists only once scripts/stack up ran in this checkout
	root := repoRoot(t)
	stack := filepath.Join(root, ".stack")
	if dir := os.Getenv("SECKILL_STACK_DIR"); dir != "" { // scripts/stack's, when it keeps its state elsewhere
		stack = dir
	}
	local := readProps(t, filepath.Join(stack, "rocketmq/broker.conf"))
	docker := readProps(t, filepath.Join(root, "deploy/docker/broker.conf"))
	skip := map[string]bool{"namesrvAddr": true, "brokerIP1": true, "bindAddress": true, "storePathRootDir": true, "storePathCommitLog": true}
	for k, v := range docker {
		if skip[k] {
			continue
		}
		if local[k] != v {
			t.Errorf("broker.conf %s: compose %q, local stack %q", k, v, local[k])
		}
	}
	for _, k := range []string{"brokerClusterName", "brokerName", "listenPort", "mappedFileSizeCommitLog", "flushDiskType"} {
		if _, ok := docker[k]; !ok {
			t.Errorf("compose broker.conf lacks %s", k)
		}
	}
}

func readProps(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run scripts/stack up first)", err)
	}
	props := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			props[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return props
}

func flatten(cmd any) string {
	switch v := cmd.(type) {
	case string:
		return v
	case []any:
		parts := make([]string, len(v))
		for i, p := range v {
			parts[i], _ = p.(string)
		}
		return strings.Join(parts, " ")
	}
	return ""
}
