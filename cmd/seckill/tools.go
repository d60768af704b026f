package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/worker"
)

func newConfigCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "config",
		Short: "Print the effective configuration (secrets masked)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), a.cfg.String())
			return err
		},
	}
}

func newTokenCmd(a *app) *cobra.Command {
	var (
		user int64
		role string
		ttl  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "token --user ID [--role buyer|admin] [--ttl 1h]",
		Short: "Print a bearer token signed with SECKILL_JWT_SECRET",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok, err := auth.Sign([]byte(a.cfg.JWTSecret.Value()), user, auth.Role(role), ttl, time.Now())
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), tok)
			return err
		},
	}
	cmd.Flags().Int64Var(&user, "user", 0, "user id (a positive integer)")
	cmd.Flags().StringVar(&role, "role", string(auth.RoleBuyer), "buyer or admin")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is valid")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}

func newConsumerCmd(a *app) *cobra.Command {
	var url string
	cmd := &cobra.Command{
		Use:   "consumer hold|release|status",
		Short: "Hold or release a running worker's order consumer (no saga starts while held), or show its state",
		Long: "Calls the worker's ops listener (POST " + worker.ConsumerPath + "/hold, /release; GET for the status) with an admin\n" +
			"token signed by SECKILL_JWT_SECRET. See docs/runbook.md, \"Hold new sagas\".",
		Args:      cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"hold", "release", "status"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if url == "" {
				url = "http://" + a.cfg.Worker.MetricsAddr
			}
			token, err := auth.Sign([]byte(a.cfg.JWTSecret.Value()), 1, auth.RoleAdmin, time.Minute, time.Now())
			if err != nil {
				return err
			}
			held, err := worker.SwitchConsumer(cmd.Context(), url, token, args[0])
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
