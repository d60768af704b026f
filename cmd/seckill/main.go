// Command seckill is the one binary of the flash-sale pipeline. Each role is
// a subcommand: api, worker, migrate, reconcile, and the operator's tools
// token, consumer (hold or release a worker's order consumer) and config.
// The bench is a binary of its own, cmd/seckill-bench.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/gin-gonic/gin"
	"github.com/spf13/cobra"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/queue"
)

// app is what every subcommand gets: the parsed config and the logger.
type app struct {
	cfg config.Config
	log *slog.Logger
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRoot().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "seckill:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	a := &app{}
	root := &cobra.Command{
		Use:           "seckill",
		Short:         "Flash-sale order pipeline: API, saga worker, migrations and operator tools",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			a.cfg, a.log = cfg, cfg.Log.Logger(cmd.ErrOrStderr())
			// Process-wide settings of libraries, here and nowhere else:
			// third-party code logging through slog's default, gin's mode,
			// the RocketMQ client's own (chatty) logger.
			slog.SetDefault(a.log)
			gin.SetMode(gin.ReleaseMode)
			queue.SetClientLogLevel("warn")
			return nil
		},
	}
	root.AddCommand(newMigrateCmd(a), newConfigCmd(a), newWorkerCmd(a), newAPICmd(a), newTokenCmd(a), newReconcileCmd(a), newConsumerCmd(a))
	return root
}

// orSetting is a flag's value when the command line sets it, else the
// setting's: the flags of worker and reconcile override their settings.
func orSetting[T any](cmd *cobra.Command, flag string, value, setting T) T {
	if cmd.Flags().Changed(flag) {
		return value
	}
	return setting
}

// setMemoryLimit gives the process a soft memory limit of mb MiB unless the
// environment's GOMEMLIMIT (already applied by the runtime) sets one, or mb
// is 0. Under it the collector works harder rather than let the heap double
// (GOGC) during a stampede; it is a target, not a cap: the process never
// fails for crossing it.
func setMemoryLimit(role string, mb int, log *slog.Logger) {
	if v := os.Getenv("GOMEMLIMIT"); v != "" {
		log.Info("soft memory limit from GOMEMLIMIT", "role", role, "limit", v)
		return
	}
	if mb <= 0 {
		return
	}
	debug.SetMemoryLimit(int64(mb) << 20)
	log.Info("soft memory limit", "role", role, "mib", mb)
}
