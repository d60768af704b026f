package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/events"
	"github.com/seckill/seckill/queue"
)

func newEventsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "The order events the shop receives (docs/events.md)"}
	var since string
	replay := &cobra.Command{
		Use:   "replay --since <RFC3339 time|duration ago>",
		Short: "Send again to SECKILL_EVENTS_TOPIC every order event recorded since a point in time, in order",
		Long: "Reads the outbox (order_events) from --since on, published or not, and sends each event again with its\n" +
			"event id: consumers that dedupe on it take only what they missed. --since is a time (2026-12-03T10:00:00Z)\n" +
			"or a duration before now (90m).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			from, err := parseSince(since, time.Now())
			if err != nil {
				return err
			}
			d := &deps{cfg: a.cfg, log: a.log}
			defer func() { _ = d.close() }()
			st, err := d.mysql(cmd.Context())
			if err != nil {
				return err
			}
			signer, err := eventSigner(a.cfg)
			if err != nil {
				return err
			}
			pub, err := queue.NewKeyedProducer(a.cfg.RocketMQ)
			if err != nil {
				return err
			}
			d.onClose(pub.Close)
			n, err := events.Replay(cmd.Context(), st, events.Signed(pub, signer), a.cfg.Events, from)
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "replayed %d order events since %s to %s\n", n, from.UTC().Format(time.RFC3339Nano), a.cfg.Events.Topic)
			return err
		},
	}
	replay.Flags().StringVar(&since, "since", "", "an RFC 3339 time, or a duration before now (e.g. 2h)")
	_ = replay.MarkFlagRequired("since")
	cmd.AddCommand(replay, &cobra.Command{
		Use:   "keygen",
		Short: "Make a new order events signing key: its seed for SECKILL_EVENTS_SIGNING_KEY, its public key for shops",
		Long: "Prints a new Ed25519 key: the seed (secret: SECKILL_EVENTS_SIGNING_KEY, on the workers that publish) and its\n" +
			"public key and key id (SECKILL_EVENTS_PUBLIC_KEYS on the API, before the old one during a rotation; shops\n" +
			"read them from GET /api/v1/events/keys). See docs/events.md.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "SECKILL_EVENTS_SIGNING_KEY=%s\npublic key %s (kid %s)\n",
				base64.StdEncoding.EncodeToString(priv.Seed()), base64.StdEncoding.EncodeToString(pub), events.KeyID(pub))
			return err
		},
	})
	return cmd
}

// eventSigner is the publisher's signer of order events; the published
// development key only with SECKILL_DEV.
func eventSigner(cfg config.Config) (*events.Signer, error) {
	if err := cfg.CheckEventsSigningKey(); err != nil {
		return nil, err
	}
	seed, err := cfg.Events.EventsSigningSeed()
	if err != nil {
		return nil, err
	}
	return events.NewSigner(seed)
}

// parseSince reads an RFC 3339 time or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("--since %q: neither an RFC 3339 time nor a positive duration", s)
	}
	return now.Add(-d), nil
}
