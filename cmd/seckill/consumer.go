package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/worker"
)

// newConsumerCmd holds and releases a running worker's order consumer
// through its ops listener (worker.OpsHandler), with an admin token signed
// by SECKILL_JWT_SECRET: the operator's lever during Temporal maintenance.
func newConsumerCmd(a *app) *cobra.Command {
	var url string
	paths := map[string]string{"hold": worker.HoldPath, "release": worker.ReleasePath, "status": worker.ConsumerPath}
	cmd := &cobra.Command{
		Use:   "consumer hold|release|status",
		Short: "Hold or release a running worker's order consumer (no saga starts while held), or show its state",
		Long: "Calls the worker's ops listener (SECKILL_WORKER_METRICS_ADDR, or --worker) with an admin token signed by\n" +
			"SECKILL_JWT_SECRET. While held, the worker starts no saga and acknowledges nothing: orders wait in the worker\n" +
			"and the broker; buyers are still answered. The same as\n" +
			"  curl -X POST -H \"Authorization: Bearer $(seckill token --user 1 --role admin)\" http://127.0.0.1:9091" + worker.HoldPath,
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"hold", "release", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			path, ok := paths[args[0]]
			if !ok {
				return fmt.Errorf("unknown action %q: want hold, release or status", args[0])
			}
			if url == "" {
				url = "http://" + a.cfg.Worker.MetricsAddr
			}
			token, err := auth.Sign([]byte(a.cfg.JWTSecret.Value()), 1, auth.RoleAdmin, time.Minute, time.Now())
			if err != nil {
				return err
			}
			held, err := worker.SwitchConsumer(cmd.Context(), url, token, path)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "order consumer held=%v\n", held)
			return err
		},
	}
	cmd.Flags().StringVar(&url, "worker", "", "the worker's ops listener (default http://$SECKILL_WORKER_METRICS_ADDR)")
	return cmd
}
