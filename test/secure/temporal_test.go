package secure_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/testkit"
)

// The TLS PostgreSQL's login for Temporal (as the cluster profile's).
const (
	pgUser     = "temporal"
	pgPassword = "temporal-secret-0123456789"
	pgBin      = "/usr/lib/postgresql/15/bin"
)

// tlsTemporal is the server of startTemporalOnTLSPostgres.
var tlsTemporal server[tlsTemporalServer]

type tlsTemporalServer struct {
	pg     tlsPostgres
	addr   string
	caFile string // the CA PostgreSQL's certificate chains to (the first caller's)
}

// tlsPostgres is the private PostgreSQL of startTemporalOnTLSPostgres.
type tlsPostgres struct {
	port   int
	socket string // its unix socket directory (the superuser logs in there)
}

// startTemporalOnTLSPostgres returns the frontend address (host:port, plain
// gRPC) of a Temporal server of this package's own, built from the cluster
// profile's binary and deploy/temporal/server.yaml with the sql stores' TLS
// on, on a PostgreSQL of its own that accepts only TLS connections
// (pg_hba: hostssl with a password, nothing else over TCP) with a server
// certificate from ca; Temporal verifies it against ca and 127.0.0.1
// (sslmode=verify-full). The namespace default and seckill's search
// attributes are registered. Started once per package run (the first
// caller's ca is the one used) and stopped after the last test.
func startTemporalOnTLSPostgres(t testing.TB, ca *testCA) string {
	t.Helper()
	return tlsTemporal.get(t, "Temporal on TLS PostgreSQL", func() (tlsTemporalServer, error) {
		pg, addr, caFile, err := launchTemporalOnTLSPostgres(t, ca)
		return tlsTemporalServer{pg: pg, addr: addr, caFile: caFile}, err
	}).addr
}

// temporalServerDir is where scripts/stack builds the cluster profile's
// Temporal server and its sql tool (bin/) and keeps the schema (schema/).
func temporalServerDir() (string, error) {
	d := filepath.Join(cacheDir(), "temporal-server-1.29.1")
	for _, f := range []string{"bin/temporal-server", "bin/temporal-sql-tool", "schema/postgresql/v12"} {
		if _, err := os.Stat(filepath.Join(d, f)); err != nil {
			return "", fmt.Errorf("the cluster profile's Temporal server is not built (scripts/stack up --profile cluster): %w", err)
		}
	}
	return d, nil
}

// asPostgres runs a PostgreSQL program as the postgres user when we are root
// (the server refuses to run as root), as scripts/lib/stack-cluster.sh does.
func asPostgres(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("setpriv", append([]string{"--reuid=postgres", "--regid=postgres", "--init-groups", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// chownPostgres gives paths to the postgres user when we are root.
func chownPostgres(paths ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	return exec.Command("chown", append([]string{"-R", "postgres:postgres"}, paths...)...).Run()
}

func launchTemporalOnTLSPostgres(t testing.TB, ca *testCA) (pg tlsPostgres, addr, caFile string, err error) {
	srv, err := temporalServerDir()
	if err != nil {
		return pg, "", "", err
	}
	dir, err := sharedDir("seckill-secure-temporal-")
	if err != nil {
		return pg, "", "", err
	}
	// The CA outlives the test that made it: the server reads it on every
	// new connection.
	caFile = filepath.Join(dir, "ca.pem")
	b, err := os.ReadFile(ca.CAFile())
	if err != nil {
		return pg, "", "", err
	}
	if err := os.WriteFile(caFile, b, 0o644); err != nil {
		return pg, "", "", err
	}
	if pg, err = startTLSPostgres(t, ca, dir); err != nil {
		return pg, "", "", err
	}
	// Temporal's client side of TLS: the CA, with host verification.
	tlsFlags := []string{"--tls", "--tls-ca-file", caFile}
	for _, db := range []struct{ name, schema string }{{"temporal", "temporal"}, {"temporal_visibility", "visibility"}} {
		for _, step := range [][]string{{"create"}, {"setup-schema", "-v", "0.0"},
			{"update-schema", "-d", filepath.Join(srv, "schema", "postgresql", "v12", db.schema, "versioned")}} {
			args := append([]string{"--plugin", "postgres12", "--ep", "127.0.0.1", "-p", strconv.Itoa(pg.port),
				"-u", pgUser, "--pw", pgPassword, "--db", db.name}, tlsFlags...)
			out, err := exec.Command(filepath.Join(srv, "bin", "temporal-sql-tool"), append(args, step...)...).CombinedOutput()
			if err != nil {
				return pg, "", "", fmt.Errorf("temporal-sql-tool %s %s: %v\n%s", db.name, step[0], err, out)
			}
		}
	}
	ports := map[string]int{}
	for _, name := range []string{"TEMPORAL_PORT", "TEMPORAL_HISTORY_PORT", "TEMPORAL_MATCHING_PORT", "TEMPORAL_WORKER_PORT",
		"TEMPORAL_MEMBERSHIP_PORT", "TEMPORAL_HISTORY_MEMBERSHIP_PORT", "TEMPORAL_MATCHING_MEMBERSHIP_PORT",
		"TEMPORAL_WORKER_MEMBERSHIP_PORT", "TEMPORAL_HTTP_PORT", "TEMPORAL_METRICS_PORT"} {
		if ports[name], err = freeLowPort(); err != nil {
			return pg, "", "", err
		}
	}
	cfgDir := filepath.Join(dir, "temporal", "config")
	if err := os.MkdirAll(cfgDir, 0o755); err != nil {
		return pg, "", "", err
	}
	// The dynamic config of the cluster profile (scripts/lib/stack-cluster.sh).
	dyn := "system.enableActivityEagerExecution:\n  - value: true\nsystem.enableEagerWorkflowStart:\n  - value: true\n" +
		"system.forceSearchAttributesCacheRefreshOnRead:\n  - value: true\n"
	if err := os.WriteFile(filepath.Join(cfgDir, "dynamicconfig.yaml"), []byte(dyn), 0o644); err != nil {
		return pg, "", "", err
	}
	vars := map[string]string{
		"TEMPORAL_HISTORY_SHARDS": "4", "PG_PORT": strconv.Itoa(pg.port), "PG_USER": pgUser, "PG_PASSWORD": pgPassword,
		"PG_TLS": "true", "PG_TLS_CA": caFile, "PG_TLS_CERT": "", "PG_TLS_KEY": "", "PG_TLS_VERIFY_HOST": "true",
		"TEMPORAL_CONFIG_DIR": cfgDir,
	}
	for k, v := range ports {
		vars[k] = strconv.Itoa(v)
	}
	text, err := renderTemplate(filepath.Join(testkit.RepoRoot(t), "deploy", "temporal", "server.yaml"), vars)
	if err != nil {
		return pg, "", "", err
	}
	if err := os.WriteFile(filepath.Join(cfgDir, "development.yaml"), []byte(text), 0o644); err != nil {
		return pg, "", "", err
	}
	log := filepath.Join(dir, "temporal-server.log")
	c, err := proc.Start(proc.Spec{Path: filepath.Join(srv, "bin", "temporal-server"),
		Args: []string{"--root", filepath.Join(dir, "temporal"), "--config", "config", "--env", "development",
			"--allow-no-auth", "start"}, Log: log})
	if err != nil {
		return pg, "", "", err
	}
	atExit(func() { c.Stop(20 * time.Second) })
	addr = "127.0.0.1:" + strconv.Itoa(ports["TEMPORAL_PORT"])
	if err := prepareNamespace(addr, c); err != nil {
		b, _ := os.ReadFile(log)
		return pg, "", "", fmt.Errorf("%w\n%s", err, tail(b, 4000))
	}
	return pg, addr, caFile, nil
}

// startTLSPostgres initialises and starts a PostgreSQL 15 in dir that takes
// TCP connections only with TLS (its certificate issued by ca for
// 127.0.0.1) and a password, and creates Temporal's login.
func startTLSPostgres(t testing.TB, ca *testCA, dir string) (tlsPostgres, error) {
	data := filepath.Join(dir, "pgdata")
	pg := tlsPostgres{socket: dir, port: freePort(t)}
	if err := os.Chmod(dir, 0o755); err != nil {
		return pg, err
	}
	if err := chownPostgres(dir); err != nil {
		return pg, err
	}
	if out, err := asPostgres(filepath.Join(pgBin, "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8",
		"--locale=C.UTF-8", "--auth-local=trust", "--auth-host=scram-sha-256").CombinedOutput(); err != nil {
		return pg, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	// The server's certificate and key, readable by the server only.
	certFile, keyFile := ca.Issue(t, "127.0.0.1", "localhost")
	for src, dst := range map[string]string{certFile: "server.crt", keyFile: "server.key"} {
		b, err := os.ReadFile(src)
		if err != nil {
			return pg, err
		}
		if err := os.WriteFile(filepath.Join(data, dst), b, 0o600); err != nil {
			return pg, err
		}
	}
	// Over TCP only TLS with a password; no hostnossl line, so a plain
	// connection finds no entry and is refused.
	hba := "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return pg, err
	}
	if err := chownPostgres(data); err != nil {
		return pg, err
	}
	log := filepath.Join(dir, "postgres.log")
	cmd := asPostgres(filepath.Join(pgBin, "postgres"), "-D", data, "-p", strconv.Itoa(pg.port), "-k", dir,
		"-h", "127.0.0.1", "-c", "ssl=on", "-c", "max_connections=100", "-c", "shared_buffers=64MB",
		"-c", "logging_collector=off", "-c", "log_min_messages=warning")
	c, err := proc.Start(proc.Spec{Path: cmd.Path, Args: cmd.Args[1:], Log: log})
	if err != nil {
		return pg, err
	}
	// SIGINT is PostgreSQL's fast shutdown.
	atExit(func() {
		_ = c.Signal(os.Interrupt)
		select {
		case <-c.Done():
		case <-time.After(20 * time.Second):
			_ = c.Kill()
		}
	})
	deadline := time.Now().Add(time.Minute)
	for exec.Command(filepath.Join(pgBin, "pg_isready"), "-q", "-h", dir, "-p", strconv.Itoa(pg.port)).Run() != nil {
		select {
		case <-c.Done():
			b, _ := os.ReadFile(log)
			return pg, fmt.Errorf("postgres exited at start: %v\n%s", c.Err(), b)
		default:
		}
		if time.Now().After(deadline) {
			return pg, errors.New("postgres not ready within a minute")
		}
		time.Sleep(200 * time.Millisecond)
	}
	sql := fmt.Sprintf("CREATE ROLE %s LOGIN CREATEDB PASSWORD '%s'", pgUser, pgPassword)
	if out, err := pg.psqlSuper(sql); err != nil {
		return pg, fmt.Errorf("create role: %v\n%s", err, out)
	}
	return pg, nil
}

// psqlSuper runs sql as the superuser over the unix socket.
func (pg tlsPostgres) psqlSuper(sql string) ([]byte, error) {
	return exec.Command(filepath.Join(pgBin, "psql"), "-X", "-q", "-tA", "-v", "ON_ERROR_STOP=1", "-h", pg.socket,
		"-p", strconv.Itoa(pg.port), "-U", "postgres", "-d", "postgres", "-c", sql).CombinedOutput()
}

// psqlTCP connects as Temporal's login over TCP with the given libpq
// connection settings (sslmode, sslrootcert) and runs select 1.
func (pg tlsPostgres) psqlTCP(conn string) ([]byte, error) {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=temporal connect_timeout=10 %s", pg.port, pgUser, conn)
	cmd := exec.Command(filepath.Join(pgBin, "psql"), "-X", "-tA", "-c", "select 1", dsn)
	cmd.Env = append(os.Environ(), "PGPASSWORD="+pgPassword)
	return cmd.CombinedOutput()
}

// prepareNamespace waits for the frontend, registers the namespace default
// and seckill's search attributes (what scripts/stack's prepare step does
// with the temporal CLI), and waits until they are listed.
func prepareNamespace(addr string, server *proc.Child) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var c client.Client
	var err error
	for {
		if c, err = client.DialContext(ctx, client.Options{HostPort: addr, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))}); err == nil {
			break
		}
		select {
		case <-server.Done():
			return fmt.Errorf("temporal-server exited at start: %v", server.Err())
		case <-ctx.Done():
			return fmt.Errorf("temporal frontend %s: %w", addr, err)
		case <-time.After(time.Second):
		}
	}
	defer c.Close()
	_, err = c.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: "default", WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour)})
	if err != nil {
		return fmt.Errorf("register namespace default: %w", err)
	}
	want := map[string]enumspb.IndexedValueType{
		"SeckillItemId":      enumspb.INDEXED_VALUE_TYPE_INT,
		"SeckillUserId":      enumspb.INDEXED_VALUE_TYPE_INT,
		"SeckillOrderStatus": enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	}
	for {
		_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: "default", SearchAttributes: want})
		if err == nil {
			var list *operatorservice.ListSearchAttributesResponse
			if list, err = c.OperatorService().ListSearchAttributes(ctx,
				&operatorservice.ListSearchAttributesRequest{Namespace: "default"}); err == nil {
				missing := 0
				for k := range want {
					if _, ok := list.GetCustomAttributes()[k]; !ok {
						missing++
					}
				}
				if missing == 0 {
					return nil
				}
				err = fmt.Errorf("%d search attributes not listed yet", missing)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes: %w", err)
		case <-time.After(time.Second):
		}
	}
}

// freeLowPort returns a free loopback port below 32768: Temporal keeps
// membership ports in a smallint column, which the kernel's ephemeral ports
// (from 32768 on) overflow.
func freeLowPort() (int, error) {
	for range 100 {
		p := 20000 + rand.IntN(12000)
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			_ = ln.Close()
			return p, nil
		}
	}
	return 0, errors.New("no free port below 32768")
}

// renderTemplate is scripts/lib/stack-cluster.sh's render_template: the
// file without its comment lines, each ${NAME} replaced by vars[NAME]; a
// placeholder without a value is an error.
func renderTemplate(path string, vars map[string]string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	placeholder := regexp.MustCompile(`\$\{([A-Z0-9_]+)\}`)
	var out strings.Builder
	var missing []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		out.WriteString(placeholder.ReplaceAllStringFunc(line, func(m string) string {
			name := placeholder.FindStringSubmatch(m)[1]
			v, ok := vars[name]
			if !ok {
				missing = append(missing, name)
			}
			return v
		}) + "\n")
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s: no value for %v", path, missing)
	}
	return out.String(), nil
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestTemporalOnTLSPostgres runs a sale whose sagas run on a Temporal server
// that keeps its state in a PostgreSQL reached only over TLS, verified
// against the test's CA (deploy/temporal/server.yaml with its tls block
// on); and proves that PostgreSQL refuses a plaintext connection with the
// right password, and that a client verifying against another CA refuses
// the server.
func TestTemporalOnTLSPostgres(t *testing.T) {
	requireEnabled(t)
	ca := newTestCA(t)
	addr := startTemporalOnTLSPostgres(t, ca)
	pg, caFile := tlsTemporal.v.pg, tlsTemporal.v.caFile

	t.Run("refused", func(t *testing.T) {
		out, err := pg.psqlTCP("sslmode=disable")
		if err == nil || !strings.Contains(string(out), "no encryption") {
			t.Errorf("a plaintext connection answered %v: %s; want refused by pg_hba (no encryption)", err, out)
		} else {
			t.Logf("plaintext refused: %s", strings.TrimSpace(string(out)))
		}
		other := newTestCA(t)
		if out, err := pg.psqlTCP("sslmode=verify-full sslrootcert=" + other.CAFile()); err == nil {
			t.Errorf("a client verifying against another CA connected: %s", out)
		}
		if out, err := pg.psqlTCP("sslmode=verify-full sslrootcert=" + caFile); err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("TLS verified against the test CA: %v: %s", err, out)
		}
	})
	t.Run("sale", func(t *testing.T) {
		tmp := testkit.Config(t).Temporal
		tmp.Address, tmp.Namespace = addr, "default"
		tmp.TLS, tmp.TLSFiles = false, config.TLSFiles{}
		runSale(t, backends{rocketmq: testkit.Config(t).RocketMQ, temporal: tmp})
		// Every connection of Temporal's login is encrypted.
		out, err := pg.psqlSuper(`select count(*) filter (where s.ssl) || ' ' || count(*) filter (where not s.ssl)
			from pg_stat_ssl s join pg_stat_activity a using (pid) where a.usename = '` + pgUser + `'`)
		var tls, plain int
		if _, serr := fmt.Sscan(string(out), &tls, &plain); err != nil || serr != nil || tls == 0 || plain != 0 {
			t.Errorf("Temporal's connections: %q (%v, %v), want some with TLS and none without", out, err, serr)
		} else {
			t.Logf("Temporal's PostgreSQL connections: %d, all with TLS", tls)
		}
	})
}
