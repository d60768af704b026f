package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles are a client's TLS settings for one backend (PEM files; the
// ServerName checked defaults to the host dialled).
type TLSFiles struct {
	CA         string `env:"CA"`
	Cert       string `env:"CERT"`
	Key        string `env:"KEY"`
	ServerName string `env:"SERVER_NAME"`
}

// Client is the TLS config of the settings named prefix, nil for plaintext.
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
