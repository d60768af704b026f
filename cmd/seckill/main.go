// Command seckill is the one binary of the flash-sale pipeline: each role
// and operator tool is a subcommand.
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
			// Process-wide library settings, here and nowhere else.
			slog.SetDefault(a.log)
			gin.SetMode(gin.ReleaseMode)
			queue.SetClientLogLevel("warn")
			return nil
		},
	}
	root.AddCommand(newMigrateCmd(a), newConfigCmd(a), newWorkerCmd(a), newAPICmd(a), newTokenCmd(a), newReconcileCmd(a), newConsumerCmd(a), newTestpayCmd(a), newEventsCmd(a))
	return root
}

// orSetting is a flag's value when the command line sets it, else the setting's.
func orSetting[T any](cmd *cobra.Command, flag string, value, setting T) T {
	if cmd.Flags().Changed(flag) {
		return value
	}
	return setting
}

// setMemoryLimit sets a soft memory limit of mb MiB (none when 0) unless
// GOMEMLIMIT, already applied by the runtime, sets one.
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
