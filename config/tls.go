package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles are a client's TLS settings for one backend: CA (a PEM file)
// replaces the system roots; Cert and Key (PEM files) are the client
// certificate of mutual TLS; ServerName overrides the name checked in the
// server's certificate (default: the host dialled, so every node of a
// cluster is checked against its own name).
type TLSFiles struct {
	CA         string `env:"CA"`
	Cert       string `env:"CERT"`
	Key        string `env:"KEY"`
	ServerName string `env:"SERVER_NAME"`
}

// Client is the TLS config of a client whose settings are named prefix
// (e.g. SECKILL_REDIS_TLS), or nil for plaintext when on is false and no
// file is set. The server's certificate is always verified.
func (f TLSFiles) Client(on bool, prefix string) (*tls.Config, error) {
	if !on && f.CA == "" && f.Cert == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.Cert != "" {
		pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
		if err != nil {
			return nil, fmt.Errorf("%s_CERT/KEY: %w", prefix, err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	if f.CA != "" {
		pem, err := os.ReadFile(f.CA)
		if err != nil {
			return nil, fmt.Errorf("%s_CA: %w", prefix, err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CA: no certificate in %s", prefix, f.CA)
		}
	}
	return t, nil
}
