package main

import (
	"github.com/spf13/cobra"

	"github.com/seckill/seckill/migrations"
)

func newMigrateCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:       "migrate [up|down|version]",
		Short:     "Apply (up, the default) or revert (down) the embedded MySQL migrations",
		Args:      cobra.MatchAll(cobra.MaximumNArgs(1), cobra.OnlyValidArgs),
		ValidArgs: []string{"up", "down", "version"},
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "up"
			if len(args) == 1 {
				dir = args[0]
			}
			dsn, err := a.cfg.MySQL.DSN()
			if err != nil {
				return err
			}
			m, err := migrations.New(dsn)
			if err != nil {
				return err
			}
			defer func() { _ = m.Close() }()
			switch dir {
			case "up":
				err = m.Up()
			case "down":
				err = m.Down()
			}
			if err != nil {
				return err
			}
			v, dirty, err := m.Version()
			if err != nil {
				return err
			}
			a.log.Info("migrations", "direction", dir, "database", a.cfg.MySQL.Database, "version", v, "dirty", dirty)
			return nil
		},
	}
}
