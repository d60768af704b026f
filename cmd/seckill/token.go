package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/auth"
)

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
