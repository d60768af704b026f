package main

import (
	"github.com/spf13/cobra"

	"github.com/seckill/seckill/worker"
)

func newWorkerCmd(a *app) *cobra.Command {
	var consumer, temporal bool
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run the order consumer (RocketMQ -> OrderSaga, dead letters) and the Temporal saga worker",
		Long: "Runs both roles by default. --consumer=false runs only the Temporal worker; --temporal=false only the\n" +
			"consumers. Without the flags SECKILL_WORKER_CONSUMER and SECKILL_WORKER_TEMPORAL decide.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := a.cfg
			if cmd.Flags().Changed("consumer") {
				cfg.Worker.Consumer = consumer
			}
			if cmd.Flags().Changed("temporal") {
				cfg.Worker.Temporal = temporal
			}
			a.log.Info("seckill worker starting", "consumer", cfg.Worker.Consumer, "temporal", cfg.Worker.Temporal)
			setMemoryLimit("worker", cfg.Worker.MemoryLimitMB, a.log)
			return worker.Run(cmd.Context(), cfg, a.log)
		},
	}
	cmd.Flags().BoolVar(&consumer, "consumer", true, "run the RocketMQ order and dead-letter consumers")
	cmd.Flags().BoolVar(&temporal, "temporal", true, "run the Temporal worker for OrderSaga")
	return cmd
}
