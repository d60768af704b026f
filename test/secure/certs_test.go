// Package secure_test runs sales over secured connections to real,
// private services (Redis ACL and TLS, MySQL TLS, RocketMQ ACL, Temporal on
// PostgreSQL over TLS), with certificates the test makes, and proves each
// insecure connection is refused. The services are private instances on
// free ports in temp dirs, so the tests disturb no one; they start several
// servers, so they run only with SECKILL_SECURE=1 and never under -short.
// What a sale needs besides the server under test comes from the stack the
// environment points at: make test points it at the cluster profile's
// services, because the failover tests stop the default stack's meanwhile:
//
//	eval "$(scripts/stack env --profile cluster)"   # or the default stack's
//	SECKILL_SECURE=1 SECKILL_DEV=1 go test -count=1 ./test/secure/...
package secure_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seckill/seckill/testkit"
)

// requireEnabled skips the test unless the secure tests were asked for.
func requireEnabled(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts private servers: not under -short")
	}
	if os.Getenv("SECKILL_SECURE") != "1" {
		t.Skip("starts private servers: set SECKILL_SECURE=1")
	}
}

// testCA is a certificate authority of one test: its certificate and key
// live in the test's temp dir and vanish with it.
type testCA struct {
	dir    string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	caFile string
}

var serial atomic.Int64

// newTestCA makes a fresh CA (ECDSA P-256, valid for a day) in the test's
// temp dir.
func newTestCA(t testing.TB) *testCA {
	t.Helper()
	return newCAIn(t, t.TempDir())
}

// newCAIn is newTestCA with its files in dir (a shared server's, which
// outlives the test that started it).
func newCAIn(t testing.TB, dir string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: "seckill test CA " + strconv.FormatInt(serial.Load(), 10)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{dir: dir, cert: cert, key: key}
	ca.caFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.caFile, "CERTIFICATE", der)
	return ca
}

// CAFile is the CA's certificate (PEM), for clients' and servers' CA settings.
func (ca *testCA) CAFile() string { return ca.caFile }

// Issue makes a certificate signed by the CA for hosts (IP addresses or DNS
// names; the first is the common name), usable by a server and a client,
// and returns its PEM files. No host: 127.0.0.1 and localhost.
func (ca *testCA) Issue(t testing.TB, hosts ...string) (certFile, keyFile string) {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := serial.Add(1)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(n),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	base := filepath.Join(ca.dir, "cert-"+strconv.FormatInt(n, 10))
	certFile, keyFile = base+".pem", base+"-key.pem"
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t testing.TB, path, kind string, der []byte) {
	t.Helper()
	// 0600: servers (PostgreSQL) refuse a key file others can read.
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	addr := testkit.FreeAddr(t)
	p, err := strconv.Atoi(addr[strings.LastIndex(addr, ":")+1:])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCAIssuesVerifiableCerts checks the helper itself: a certificate it
// issues verifies against its CA for 127.0.0.1 and localhost, and not
// against another CA.
func TestCAIssuesVerifiableCerts(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	certFile, keyFile := ca.Issue(t)
	if _, err := os.Stat(keyFile); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ca   *testCA
		host string
		ok   bool
	}{{ca, "127.0.0.1", true}, {ca, "localhost", true}, {ca, "example.com", false}, {other, "127.0.0.1", false}} {
		roots := x509.NewCertPool()
		roots.AddCert(c.ca.cert)
		_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: c.host})
		if (err == nil) != c.ok {
			t.Errorf("verify for %s: %v, want ok=%v", c.host, err, c.ok)
		}
	}
}
