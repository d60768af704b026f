package main

import (
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/reconcile"
)

// seckill reconcile looks at the window the worker's periodic run uses
// unless its flags say otherwise.
func TestReconcileFlagsDefaultToSettings(t *testing.T) {
	cfg, err := config.LoadFrom(map[string]string{"SECKILL_RECONCILE_GRACE": "7m", "SECKILL_RECONCILE_SINCE": "5h"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args         []string
		grace, since time.Duration
	}{
		{nil, 7 * time.Minute, 5 * time.Hour},
		{[]string{"--grace=30s"}, 30 * time.Second, 5 * time.Hour},
		{[]string{"--since=1h", "--grace=0s"}, 0, time.Hour},
	} {
		cmd := newReconcileCmd(&app{cfg: cfg})
		if err := cmd.ParseFlags(tc.args); err != nil {
			t.Fatal(err)
		}
		grace, _ := cmd.Flags().GetDuration("grace")
		since, _ := cmd.Flags().GetDuration("since")
		g, s := orSetting(cmd, "grace", grace, cfg.Reconcile.Grace), orSetting(cmd, "since", since, cfg.Reconcile.Since)
		if g != tc.grace || s != tc.since {
			t.Errorf("%v: grace %v since %v, want %v %v", tc.args, g, s, tc.grace, tc.since)
		}
	}
}

// A run whose sagas could not be listed never prints a bare "no drift".
func TestPrintReconcileNamesSkippedChecks(t *testing.T) {
	var b strings.Builder
	printReconcile(&b, reconcile.Report{Items: []int64{7}, Findings: []reconcile.Finding{}})
	if b.String() != "items [7]: no drift\n" {
		t.Fatalf("clean run printed %q", b.String())
	}
	b.Reset()
	printReconcile(&b, reconcile.Report{Items: []int64{7}, Findings: []reconcile.Finding{},
		Unchecked: []reconcile.Unchecked{{ItemID: 7, Reason: "sagas not listed, their checks skipped: boom"}}})
	if got := b.String(); strings.Contains(got, ": no drift\n") || !strings.Contains(got, "item 7: sagas not listed") {
		t.Fatalf("run with skipped checks printed %q", got)
	}
}
