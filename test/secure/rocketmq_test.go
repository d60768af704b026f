package secure_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/testkit"
)

// The ACL broker's users: the admin (a super user the broker creates at its
// first start, also the broker's own inner-client credentials) and the
// application's normal user, which holds only the rights seckill needs.
const (
	rmqAdminUser   = "rmq-admin"
	rmqAdminSecret = "rmq-admin-secret-0123456789"
	rmqAppUser     = "seckill"
	rmqAppSecret   = "seckill-secret-0123456789"
	// rmqAppResources and rmqAppActions are what seckill's producer,
	// consumers and topic admin need on the broker: send (Pub), consume and
	// commit offsets (Sub), create the dead-letter topic and the tests'
	// topics (Create; the broker asks for it on every create-or-update of
	// a topic, whether the topic exists or not).
	rmqAppResources = "Topic:*,Group:*"
	rmqAppActions   = "Pub,Sub,Create"
)

var aclRocketMQ server[config.RocketMQ]

// startACLRocketMQ returns a RocketMQ 5.3.3 name server and broker of this
// package's own with ACL 2.0 on (authentication and authorization), and the
// credentials of a normal user allowed to send, consume and create topics
// (rmqAppActions on every topic and group), nothing else: the returned config's
// NameServers, Brokers, AccessKey and SecretKey are set, the rest is the
// defaults' (set Topic and the groups per test). The servers start once per
// package run (30 s to 2 min on a 2-core box, by its load; the user and
// its ACL are made with mqadmin, two more JVMs) and stop after the last
// test.
func startACLRocketMQ(t testing.TB) config.RocketMQ {
	t.Helper()
	return aclRocketMQ.get(t, "ACL RocketMQ", launchACLRocketMQ)
}

// rocketMQLib is the RocketMQ jars' directory scripts/stack installs.
func rocketMQLib() (string, error) {
	lib := filepath.Join(cacheDir(), "rocketmq-5.3.3", "lib")
	if _, err := os.Stat(filepath.Join(lib, "rocketmq-broker-5.3.3.jar")); err != nil {
		return "", fmt.Errorf("RocketMQ jars not found (scripts/stack up installs them): %w", err)
	}
	return lib, nil
}

// cacheDir is where scripts/stack installs its tools.
func cacheDir() string {
	if d := os.Getenv("SECKILL_CACHE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "seckill")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "seckill")
}

// rmqJava are the JVM options of scripts/lib/stack-services.sh with
// smaller heaps, the serial collector and the C1 compiler only: a test's
// few messages need no peak speed, and a start costs about half the CPU
// (name server 2.8 s against 5.7 s, broker 5.9 s against 8.9 s, measured
// on a loaded 2-core box). role names the logback configuration and the
// user.home (logs) under dir.
func rmqJava(dir, role, heap string) []string {
	return []string{"-Xms" + heap, "-Xmx" + heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
		"-XX:MaxDirectMemorySize=384m",
		"--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
		"--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
		"-Drocketmq.home.dir=" + filepath.Join(dir, "home"), "-Duser.home=" + filepath.Join(dir, role),
		"-Drmq.logback.configurationFile=rmq." + role + ".logback.xml",
		"-Dlogback.statusListenerClass=org.apache.rocketmq.logging.ch.qos.logback.core.status.NopStatusListener"}
}

func launchACLRocketMQ() (_ config.RocketMQ, err error) {
	lib, err := rocketMQLib()
	if err != nil {
		return config.RocketMQ{}, err
	}
	dir, err := sharedDir("seckill-secure-rocketmq-")
	if err != nil {
		return config.RocketMQ{}, err
	}
	nsPort, err := freeTCPPort()
	if err != nil {
		return config.RocketMQ{}, err
	}
	// The broker listens on its port, port-2 (the "VIP" channel) and port+1
	// (HA): all three must be free.
	brokerPort, err := freeTCPPort(-2, 1)
	if err != nil {
		return config.RocketMQ{}, err
	}
	ns := "127.0.0.1:" + strconv.Itoa(nsPort)
	broker := "127.0.0.1:" + strconv.Itoa(brokerPort)
	files := map[string]string{
		"namesrv.conf": fmt.Sprintf("listenPort=%d\nbindAddress=127.0.0.1\nkvConfigPath=%s\nconfigStorePath=%s\n",
			nsPort, filepath.Join(dir, "namesrv", "kv.json"), filepath.Join(dir, "namesrv", "namesrv.properties")),
		// ACL 2.0 (RocketMQ 5.3; 5.3.3 dropped ACL 1.0's aclEnable and
		// plain_acl.yml). Users and ACLs live in RocksDB under the store's
		// config dir; the admin is created at the first start.
		"broker.conf": strings.Join([]string{
			"brokerClusterName=SecureCluster", "brokerName=secure-a", "brokerId=0", "brokerRole=ASYNC_MASTER",
			"namesrvAddr=" + ns, "brokerIP1=127.0.0.1", "bindAddress=127.0.0.1", "listenPort=" + strconv.Itoa(brokerPort),
			"storePathRootDir=" + filepath.Join(dir, "store"), "storePathCommitLog=" + filepath.Join(dir, "store", "commitlog"),
			"mappedFileSizeCommitLog=67108864", "mappedFileSizeConsumeQueue=1200000", "mappedFileSizeTimerLog=16777216",
			"flushDiskType=ASYNC_FLUSH", "autoCreateTopicEnable=false", "autoCreateSubscriptionGroup=true",
			"diskMaxUsedSpaceRatio=95", "osPageCacheBusyTimeOutMills=5000", "waitTimeMillsInSendQueue=3000",
			"registerNameServerPeriod=10000",
			"authenticationEnabled=true",
			"authenticationProvider=org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider",
			"authenticationMetadataProvider=org.apache.rocketmq.auth.authentication.provider.LocalAuthenticationMetadataProvider",
			"authorizationEnabled=true",
			"authorizationProvider=org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider",
			"authorizationMetadataProvider=org.apache.rocketmq.auth.authorization.provider.LocalAuthorizationMetadataProvider",
			fmt.Sprintf(`initAuthenticationUser={"username":"%s","password":"%s"}`, rmqAdminUser, rmqAdminSecret),
			fmt.Sprintf(`innerClientAuthenticationCredentials={"accessKey":"%s","secretKey":"%s"}`, rmqAdminUser, rmqAdminSecret),
		}, "\n") + "\n",
		// mqadmin signs its requests with these.
		filepath.Join("home", "conf", "tools.yml"): fmt.Sprintf("accessKey: %s\nsecretKey: %s\n", rmqAdminUser, rmqAdminSecret),
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return config.RocketMQ{}, err
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			return config.RocketMQ{}, err
		}
	}
	start := func(role, heap, class, conf, ready string) error {
		log := filepath.Join(dir, role+".out")
		args := append(rmqJava(dir, role, heap), "-cp", filepath.Join(lib, "*"), class, "-c", filepath.Join(dir, conf))
		c, err := proc.Start(proc.Spec{Path: "java", Args: args, Log: log})
		if err != nil {
			return fmt.Errorf("start %s: %w", role, err)
		}
		atExit(func() { c.Stop(10 * time.Second) })
		return waitForLine(c, log, ready, 3*time.Minute)
	}
	if err := start("namesrv", "128m", "org.apache.rocketmq.namesrv.NamesrvStartup", "namesrv.conf", "boot success"); err != nil {
		return config.RocketMQ{}, err
	}
	if err := start("broker", "256m", "org.apache.rocketmq.broker.BrokerStartup", "broker.conf", "boot success"); err != nil {
		return config.RocketMQ{}, err
	}
	// The application's user: a normal one (no admin rights) with only the
	// actions seckill needs.
	if err := mqadmin(lib, dir, "createUser", "-b", broker, "-u", rmqAppUser, "-p", rmqAppSecret, "-t", "Normal"); err != nil {
		return config.RocketMQ{}, err
	}
	if err := mqadmin(lib, dir, "createAcl", "-b", broker, "-s", "User:"+rmqAppUser, "-r", rmqAppResources,
		"-a", rmqAppActions, "-d", "Allow"); err != nil {
		return config.RocketMQ{}, err
	}
	cfg, err := config.LoadFrom(nil)
	if err != nil {
		return config.RocketMQ{}, err
	}
	r := cfg.RocketMQ
	r.NameServers, r.Brokers = []string{ns}, []string{broker}
	r.AccessKey, r.SecretKey = rmqAppUser, config.Secret(rmqAppSecret)
	return r, nil
}

// mqadmin runs RocketMQ's admin tool as the broker's admin (tools.yml).
func mqadmin(lib, dir string, args ...string) error {
	cmd := exec.Command("java", append([]string{"-Xms64m", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Drocketmq.home.dir=" + filepath.Join(dir, "home"), "-Duser.home=" + filepath.Join(dir, "tools"),
		"-Drmq.logback.configurationFile=rmq.tools.logback.xml",
		"-cp", filepath.Join(lib, "*"), "org.apache.rocketmq.tools.command.MQAdminStartup"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("success")) {
		return fmt.Errorf("mqadmin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// waitForLine waits until the child's log holds line, failing if the child
// exits first or within limit nothing came.
func waitForLine(c *proc.Child, log, line string, limit time.Duration) error {
	deadline := time.After(limit)
	for {
		if b, err := os.ReadFile(log); err == nil && bytes.Contains(b, []byte(line)) {
			return nil
		}
		select {
		case <-c.Done():
			b, _ := os.ReadFile(log)
			return fmt.Errorf("%s: exited before %q: %v\n%s", log, line, c.Err(), b)
		case <-deadline:
			return fmt.Errorf("%s: no %q within %s", log, line, limit)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// freeTCPPort returns a loopback port that was free a moment ago, with the
// ports at the given offsets from it free too.
func freeTCPPort(offsets ...int) (int, error) {
	for range 50 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ok := true
		for _, o := range offsets {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+o))
			if err != nil {
				ok = false
				break
			}
			_ = l.Close()
		}
		_ = ln.Close()
		if ok {
			return p, nil
		}
	}
	return 0, errors.New("no free port with free neighbours")
}

// TestRocketMQACL runs a sale's orders through the real relay (seckill api)
// and order consumer (seckill worker) over a broker with ACL on, as the
// application's normal user; and proves the broker refuses a producer, and
// a topic admin, without credentials or with a wrong secret.
func TestRocketMQACL(t *testing.T) {
	requireEnabled(t)
	rmq := startACLRocketMQ(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("refused", func(t *testing.T) {
		good := rmq
		good.Topic = "secure-refused-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := queue.EnsureTopic(ctx, good, good.Topic, 1); err != nil {
			t.Fatalf("the application's user creates a topic: %v", err)
		}
		for name, c := range map[string]config.RocketMQ{
			"no credentials": func() config.RocketMQ { c := good; c.AccessKey, c.SecretKey = "", ""; return c }(),
			"wrong secret":   func() config.RocketMQ { c := good; c.SecretKey = "not-the-secret-0123456"; return c }(),
			"unknown user":   func() config.RocketMQ { c := good; c.AccessKey = "mallory"; return c }(),
		} {
			if err := sendOne(ctx, c); err == nil || !strings.Contains(err.Error(), "CODE: 16") {
				t.Errorf("%s: send answered %v, want the broker's refusal (CODE: 16, no permission)", name, err)
			}
			// The library's CreateTopic reports no refusal (it ignores the
			// answer's code): the proof is that the topic is not there.
			other := good
			other.Topic = good.Topic + "-" + strings.ReplaceAll(name, " ", "-")
			_ = queue.EnsureTopic(ctx, c, other.Topic, 1)
			if err := sendOne(ctx, other); err == nil {
				t.Errorf("%s: the topic was created", name)
			} else {
				t.Logf("%s: refused (send: %v; topic creation: the topic does not exist)", name, err)
			}
		}
		if err := sendOne(ctx, good); err != nil {
			t.Errorf("the application's user sends: %v", err)
		}
	})
	t.Run("sale", func(t *testing.T) {
		runSale(t, backends{rocketmq: rmq, temporal: testkit.Config(t).Temporal})
	})
}

// sendOne sends one message to cfg.Topic with a producer of its own.
func sendOne(ctx context.Context, cfg config.RocketMQ) error {
	p, err := queue.NewProducer(cfg)
	if err != nil {
		return err
	}
	defer func() { _ = p.Close() }()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return p.Send(ctx, cfg.Topic, "k", []byte("x"))
}
