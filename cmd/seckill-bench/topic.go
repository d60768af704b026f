package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/queue"
	"github.com/seckill/seckill/worker"
)

// newBenchTopicCmd creates or deletes the configured orders topic (and, on
// delete, the consumer group's dead-letter topic): scripts/bench gives its
// own api and worker a topic of their own and removes it afterwards, so a
// bench run never leaves messages for another deployment's consumer.
func newBenchTopicCmd(a *app) *cobra.Command {
	var queues int
	cmd := &cobra.Command{
		Use:       "topic create|delete",
		Short:     "Create or delete SECKILL_ROCKETMQ_TOPIC (delete also removes %DLQ%<SECKILL_ROCKETMQ_CONSUMER_GROUP>)",
		Args:      cobra.ExactArgs(1),
		ValidArgs: []string{"create", "delete"},
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.cfg.RocketMQ
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			switch args[0] {
			case "create":
				if err := queue.EnsureTopic(ctx, c, c.Topic, queues); err != nil {
					return err
				}
				a.log.Info("topic ready", "topic", c.Topic, "queues", queues)
			case "delete":
				for _, t := range []string{c.Topic, worker.DeadLetterTopic(c.ConsumerGroup)} {
					if err := queue.DeleteTopic(ctx, c, t); err != nil {
						return err
					}
					a.log.Info("topic deleted", "topic", t)
				}
			default:
				return fmt.Errorf("unknown action %q: want create or delete", args[0])
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&queues, "queues", 4, "read and write queues of the created topic")
	return cmd
}
