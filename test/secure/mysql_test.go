package secure_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver config.MySQL.DSN registers TLS with

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/internal/proc"
)

const (
	mysqlUser     = "seckill"
	mysqlPassword = "seckill-tls-password-0123"
)

var tlsMySQL server[config.MySQL]

// startTLSMySQL returns a private mariadbd of this package's own that
// refuses any TCP connection without TLS (require_secure_transport=ON),
// with a certificate for 127.0.0.1 and localhost from a CA of its own, and
// the config of its application user with TLS on against that CA (the CA
// file is TLSFiles.CA): verify-full. The server starts once per package run
// and stops after the last test; Database is "mysql" (runSale makes each
// sale a database of its own).
func startTLSMySQL(t testing.TB) config.MySQL {
	t.Helper()
	return tlsMySQL.get(t, "TLS MariaDB", func() (config.MySQL, error) { return launchTLSMySQL(t) })
}

func launchTLSMySQL(t testing.TB) (cfg config.MySQL, err error) {
	dir, err := sharedDir("seckill-secure-mysql-")
	if err != nil {
		return cfg, err
	}
	ca := newCAIn(t, dir)
	data := filepath.Join(dir, "data")
	if out, err := exec.Command("mariadb-install-db", "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=socket", "--skip-test-db").CombinedOutput(); err != nil {
		return cfg, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	cert, key := ca.Issue(t)
	port := freePort(t)
	sock := filepath.Join(dir, "mysqld.sock")
	log := filepath.Join(dir, "mariadb.log")
	c, err := proc.Start(proc.Spec{Path: "mariadbd", Log: log, Args: []string{"--no-defaults", "--user=root",
		"--datadir=" + data, "--socket=" + sock, "--pid-file=" + filepath.Join(dir, "mysqld.pid"),
		"--port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit=2",
		"--ssl-ca=" + ca.CAFile(), "--ssl-cert=" + cert, "--ssl-key=" + key, "--require-secure-transport=ON"}})
	if err != nil {
		return cfg, err
	}
	atExit(func() { c.Stop(30 * time.Second) })
	sqlRoot := func(stmt string) error {
		out, err := exec.Command("mariadb", "--no-defaults", "-uroot", "-S", sock, "-e", stmt).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", stmt, err, out)
		}
		return nil
	}
	deadline := time.Now().Add(time.Minute)
	for sqlRoot("SELECT 1") != nil {
		select {
		case <-c.Done():
			b, _ := os.ReadFile(log)
			return cfg, fmt.Errorf("mariadbd exited: %v\n%s", c.Err(), b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return cfg, fmt.Errorf("mariadbd on %s did not answer within a minute", sock)
		}
	}
	// The test databases are created by this user (createDatabase).
	if err := sqlRoot(fmt.Sprintf("CREATE USER '%s'@'127.0.0.1' IDENTIFIED BY '%s'; GRANT ALL ON *.* TO '%s'@'127.0.0.1'",
		mysqlUser, mysqlPassword, mysqlUser)); err != nil {
		return cfg, err
	}
	defaults, err := config.LoadFrom(nil)
	cfg = defaults.MySQL
	cfg.Host, cfg.Port, cfg.User, cfg.Password, cfg.Database = "127.0.0.1", port, mysqlUser, mysqlPassword, "mysql"
	cfg.TLS, cfg.TLSFiles = true, config.TLSFiles{CA: ca.CAFile()}
	return cfg, err
}

// TestMySQLTLS proves the private MariaDB takes the application's TLS
// connection (verify-full against the CA file, the session encrypted) and
// refuses the insecure ones: no TLS, a wrong password, a CA that did not
// sign the server's certificate, a server name its certificate does not
// hold. The sales of TestRedisACLTLS and TestSecureSale run through the
// same TLS connection (migrations, API, saga, invariant checker).
func TestMySQLTLS(t *testing.T) {
	requireEnabled(t)
	good := startTLSMySQL(t)
	db := openMySQL(t, good)
	var name, cipher string
	if err := db.QueryRow("SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &cipher); err != nil || cipher == "" {
		t.Fatalf("the session is not encrypted: cipher %q, %v", cipher, err)
	}
	t.Logf("TLS session: %s", cipher)

	plain, wrongPassword, otherCA, otherName := good, good, good, good
	plain.TLS, plain.TLSFiles = false, config.TLSFiles{}
	wrongPassword.Password = "not-the-password"
	otherCA.TLSFiles.CA = newTestCA(t).CAFile()
	otherName.TLSFiles.ServerName = "db.example.com"
	wantRefused(t, pingMySQL,
		// MariaDB answers a plaintext login under require_secure_transport
		// as a denied login: the same user and password work over TLS above.
		refusal[config.MySQL]{"no TLS", plain, "Access denied"},
		refusal[config.MySQL]{"wrong password", wrongPassword, "Access denied"},
		refusal[config.MySQL]{"a CA that did not sign the server", otherCA, "certificate signed by unknown authority"},
		refusal[config.MySQL]{"a name the server's certificate does not hold", otherName, "not db.example.com"},
	)
}

// openMySQL opens cfg with the driver seckill uses, or fails the test.
func openMySQL(t testing.TB, cfg config.MySQL) *sql.DB {
	t.Helper()
	dsn, err := cfg.DSN()
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := db.Ping(); err != nil {
		t.Fatalf("mysql over TLS: %v", err)
	}
	return db
}

func pingMySQL(cfg config.MySQL) error {
	dsn, err := cfg.DSN()
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}
