// Package temporalx dials the Temporal frontend with the project's logger.
package temporalx

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

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
	opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionNone{}
	if strings.EqualFold(cfg.Compression, "gzip") {
		opts.ConnectionOptions.GrpcCompression = &client.GrpcCompressionGzip{}
	}
	tlsCfg, err := cfg.TLSFiles.Client(cfg.TLS || cfg.APIKey.Value() != "", "SECKILL_TEMPORAL_TLS")
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
