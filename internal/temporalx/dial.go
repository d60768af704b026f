// Package temporalx dials the Temporal frontend with the project's logger.
package temporalx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/seckill/seckill/config"
)

// Dial connects to Temporal and checks the connection before returning.
func Dial(ctx context.Context, cfg config.Temporal, logger *slog.Logger) (client.Client, error) {
	opts := client.Options{
		HostPort:  cfg.Address,
		Namespace: cfg.Namespace,
		Logger:    tlog.NewStructuredLogger(logger.With("component", "temporal-sdk")),
	}
	switch cfg.Compression {
	case "none":
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	case "", "gzip":
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	default:
		return nil, fmt.Errorf("SECKILL_TEMPORAL_COMPRESSION=%q: want none or gzip", cfg.Compression)
	}
	tlsCfg, err := tlsConfig(cfg)
	if err != nil {
		return nil, err
	}
	opts.ConnectionOptions.TLS = tlsCfg
	if key := cfg.APIKey.Value(); key != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("dial temporal at %s (namespace %s): %w", cfg.Address, cfg.Namespace, err)
	}
	return c, nil
}

// tlsConfig builds the TLS settings of the frontend connection; nil means
// plaintext (loopback, a private network).
func tlsConfig(cfg config.Temporal) (*tls.Config, error) {
	if !cfg.TLS && cfg.TLSCert == "" && cfg.TLSCA == "" && cfg.APIKey.Value() == "" {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TLSServerName}
	if cfg.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("SECKILL_TEMPORAL_TLS_CERT/KEY: %w", err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("SECKILL_TEMPORAL_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("SECKILL_TEMPORAL_TLS_CA: no certificate in %s", cfg.TLSCA)
		}
		t.RootCAs = pool
	}
	return t, nil
}
