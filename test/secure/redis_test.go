package secure_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/internal/redisx"
	"github.com/seckill/seckill/testkit"
)

// The private Redis servers' ACL: the default user is off (no login without
// a user and password), the application's user may do everything; the
// Sentinel has a user of its own for its clients.
const (
	redisUser        = "seckill"
	redisPassword    = "redis-acl-password-0123"
	sentinelUser     = "seckill-sentinel"
	sentinelPassword = "sentinel-acl-password-0123"
	sentinelMaster   = "seckill"
)

// redisNode is the configuration text of a TLS-only redis-server (or
// Sentinel) on port: plaintext off (port 0), the certificate from ca,
// client certificates optional.
func redisNode(t testing.TB, ca *testCA, dir string, port int) string {
	cert, key := ca.Issue(t)
	return fmt.Sprintf("bind 127.0.0.1\nport 0\ntls-port %d\ntls-cert-file %s\ntls-key-file %s\ntls-ca-cert-file %s\n"+
		"tls-auth-clients optional\ndir %s\nsave \"\"\nappendonly no\n", port, cert, key, ca.CAFile(), dir)
}

// startRedisProcess runs redis-server on the configuration text conf
// (written to dir/name.conf; extra are more arguments) until the test ends.
func startRedisProcess(t testing.TB, dir, name, conf string, extra ...string) {
	t.Helper()
	file := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, name+".log")
	c, err := proc.Start(proc.Spec{Path: "redis-server", Args: append([]string{file}, extra...), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop(10 * time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(log)
			t.Logf("%s log:\n%s", name, b)
		}
	})
}

// startTLSRedis starts TLS-only Redis servers with ACL on in one of the
// three shapes the client knows, and returns the application's config for
// them (user, password, TLS against ca's file; KeyPrefix left to the sale):
//   - "plain": one server;
//   - "sentinel": a master and a Sentinel monitoring it, the Sentinel
//     TLS-only too, logging in to the master as the application's user and
//     asking its own clients for sentinelUser's password;
//   - "cluster": a Redis Cluster of three masters, the cluster bus on TLS
//     too, created with redis-cli --tls --cluster create.
func startTLSRedis(t testing.TB, ca *testCA, mode string) config.Redis {
	t.Helper()
	defaults, err := config.LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaults.Redis
	cfg.Username, cfg.Password = redisUser, redisPassword
	cfg.TLS, cfg.TLSFiles = true, config.TLSFiles{CA: ca.CAFile()}
	dir := t.TempDir()
	acl := fmt.Sprintf("user default off\nuser %s on >%s ~* &* +@all\n", redisUser, redisPassword)
	switch mode {
	case "plain":
		port := freePort(t)
		startRedisProcess(t, dir, "redis", redisNode(t, ca, dir, port)+acl)
		cfg.Addr = "127.0.0.1:" + strconv.Itoa(port)
	case "sentinel":
		port, sport := freePort(t), freePort(t)
		startRedisProcess(t, dir, "master", redisNode(t, ca, dir, port)+acl)
		waitRedis(t, cfg, "127.0.0.1:"+strconv.Itoa(port))
		sdir := filepath.Join(dir, "sentinel")
		if err := os.Mkdir(sdir, 0o700); err != nil {
			t.Fatal(err)
		}
		startRedisProcess(t, sdir, "sentinel", redisNode(t, ca, sdir, sport)+
			"tls-replication yes\n"+ // the Sentinel's own connections to the master are TLS
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n", sentinelMaster, port)+
			fmt.Sprintf("sentinel auth-user %s %s\nsentinel auth-pass %s %s\n", sentinelMaster, redisUser, sentinelMaster, redisPassword)+
			fmt.Sprintf("user default off\nuser %s on >%s allchannels +@all\n", sentinelUser, sentinelPassword), "--sentinel")
		cfg.MasterName, cfg.Addr = sentinelMaster, "127.0.0.1:"+strconv.Itoa(sport)
		cfg.SentinelUsername, cfg.SentinelPassword = sentinelUser, sentinelPassword
	case "cluster":
		var addrs []string
		for i := range 3 {
			port, err := freeTCPPort(10000) // the cluster bus is port+10000
			if err != nil {
				t.Fatal(err)
			}
			ndir := filepath.Join(dir, strconv.Itoa(i))
			if err := os.Mkdir(ndir, 0o700); err != nil {
				t.Fatal(err)
			}
			startRedisProcess(t, ndir, "node", redisNode(t, ca, ndir, port)+acl+
				"cluster-enabled yes\ncluster-config-file "+filepath.Join(ndir, "nodes.conf")+"\ntls-cluster yes\n")
			addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
			waitRedis(t, cfg, addrs[i])
		}
		cli := exec.Command("redis-cli", append([]string{"--tls", "--cacert", ca.CAFile(), "--user", redisUser,
			"--cluster", "create"}, append(addrs, "--cluster-yes")...)...)
		cli.Env = append(os.Environ(), "REDISCLI_AUTH="+redisPassword)
		if out, err := cli.CombinedOutput(); err != nil {
			t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
		}
		for _, a := range addrs {
			waitClusterOK(t, cfg, a)
		}
		cfg.Addrs, cfg.Cluster = addrs, true
	default:
		t.Fatalf("unknown Redis mode %q", mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		err := pingRedis(ctx, cfg)
		if err == nil {
			return cfg
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s Redis over TLS did not answer: %v", mode, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// node is cfg's plain client for one address.
func node(cfg config.Redis, addr string) config.Redis {
	cfg.Addr, cfg.Addrs, cfg.Cluster, cfg.MasterName = addr, nil, false, ""
	return cfg
}

// waitRedis waits until the server at addr answers the application's
// user's PING over TLS.
func waitRedis(t testing.TB, cfg config.Redis, addr string) {
	t.Helper()
	waitNode(t, cfg, addr, func(rdb redis.UniversalClient) error { return rdb.Ping(context.Background()).Err() })
}

// waitClusterOK waits until the node at addr says the cluster is ok.
func waitClusterOK(t testing.TB, cfg config.Redis, addr string) {
	t.Helper()
	waitNode(t, cfg, addr, func(rdb redis.UniversalClient) error {
		info, err := rdb.ClusterInfo(context.Background()).Result()
		if err == nil && !strings.Contains(info, "cluster_state:ok") {
			err = fmt.Errorf("cluster not ok: %s", info)
		}
		return err
	})
}

// waitNode polls the node at addr, as the application's user over TLS,
// until ok answers nil (30 s at most).
func waitNode(t testing.TB, cfg config.Redis, addr string, ok func(redis.UniversalClient) error) {
	t.Helper()
	rdb, err := redisx.Open(node(cfg, addr), redisx.Options{PoolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rdb.Close() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ok(rdb)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis on %s: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pingRedis opens cfg's client as the roles do and pings it (every master
// on a cluster).
func pingRedis(ctx context.Context, cfg config.Redis) error {
	rdb, err := redisx.Open(cfg, redisx.Options{PoolSize: 2, Timeout: 3 * time.Second})
	if err != nil {
		return err
	}
	defer func() { _ = rdb.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := redisx.Ping(ctx, rdb); err != nil {
		return err
	}
	// The ping of a cluster client is every master's; a set proves the
	// slots are served (and, on Sentinel, that the master was found).
	return rdb.Set(ctx, "secure-probe", "1", time.Minute).Err()
}

// TestRedisACLTLS runs, for each client shape (plain, Sentinel, Cluster),
// a sale through seckill api and worker on TLS-only Redis servers with ACL
// on, logging in as the application's user (and MySQL over TLS); and proves
// each refuses the insecure client: no TLS, a wrong password (and on
// Sentinel a wrong Sentinel password), a CA that did not sign the servers.
func TestRedisACLTLS(t *testing.T) {
	requireEnabled(t)
	mysql := startTLSMySQL(t)
	other := newTestCA(t)
	for _, mode := range []string{"plain", "sentinel", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			ca := newTestCA(t)
			good := startTLSRedis(t, ca, mode)
			plain, wrongPassword, otherCA := good, good, good
			plain.TLS, plain.TLSFiles = false, config.TLSFiles{}
			wrongPassword.Password = "not-the-password"
			otherCA.TLSFiles.CA = other.CAFile()
			refusals := []refusal[config.Redis]{
				{"no TLS", plain, ""},
				{"wrong password", wrongPassword, "WRONGPASS"},
				{"a CA that did not sign the servers", otherCA, "certificate signed by unknown authority"},
			}
			if mode == "sentinel" {
				wrongSentinel := good
				wrongSentinel.SentinelPassword = "not-the-password"
				refusals = append(refusals, refusal[config.Redis]{"wrong Sentinel password", wrongSentinel, ""})
			}
			wantRefused(t, func(c config.Redis) error { return pingRedis(context.Background(), c) }, refusals...)
			if t.Failed() {
				return
			}
			runSale(t, backends{redis: &good, mysql: &mysql,
				rocketmq: testkit.Config(t).RocketMQ, temporal: testkit.Config(t).Temporal})
		})
	}
}
