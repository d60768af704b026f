package config

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// A misspelled setting stops the load and names the setting meant.
func TestMisspelledVariableRefused(t *testing.T) {
	for typo, want := range map[string]string{
		"SECKILL_REDIS_ADR":             "SECKILL_REDIS_ADDR",
		"SECKILL_API_CONFIRM_TIMOUT":    "SECKILL_API_CONFIRM_TIMEOUT",
		"SECKILL_MYSQL_PASWORD":         "SECKILL_MYSQL_PASSWORD",
		"SECKILL_RECONCILE_INTERVALL":   "SECKILL_RECONCILE_INTERVAL",
		"SECKILL_WORKER_STICKY_CACHE":   "SECKILL_WORKER_STICKY_CACHE_SIZE",
		"SECKILL_ROCKETMQ_NAMESERVER":   "SECKILL_ROCKETMQ_NAMESRV",
		"SECKILL_TEMPORAL_TASKQUEUE":    "SECKILL_TEMPORAL_TASK_QUEUE",
		"SECKILL_JWT_SECRETS":           "SECKILL_JWT_SECRET",
		"SECKILL_API_TRUSTED_PROXY":     "SECKILL_API_TRUSTED_PROXIES",
		"SECKILL_REDIS_SENTINEL_MASTR":  "SECKILL_REDIS_SENTINEL_MASTER",
		"SECKILL_WORKER_METRICS_ADDRES": "SECKILL_WORKER_METRICS_ADDR",
	} {
		t.Run(typo, func(t *testing.T) {
			_, err := LoadFrom(map[string]string{typo: "x"})
			if err == nil {
				t.Fatalf("%s accepted", typo)
			}
			if !strings.Contains(err.Error(), typo) || !strings.Contains(err.Error(), "did you mean "+want+"?") {
				t.Fatalf("err %q, want it to name %s and suggest %s", err, typo, want)
			}
		})
	}
}

// Every setting, and the variables of the scripts and tests, load.
func TestKnownVariablesAccepted(t *testing.T) {
	environ := map[string]string{
		"SECKILL_FAILOVER":                "1",
		"SECKILL_CLUSTER_HISTORY_SHARDS":  "8",
		"SECKILL_TEMPORAL_CLI":            "/usr/bin/temporal",
		"SECKILL_MYSQL_PASSWORD":          "x",
		"NOT_OURS":                        "anything",
		"seckill_lowercase_is_not_ours_x": "y",
	}
	if _, err := LoadFrom(environ); err != nil {
		t.Fatal(err)
	}
	vs := Variables()
	seen := map[string]bool{}
	for _, v := range vs {
		if seen[v.Name] {
			t.Errorf("%s twice", v.Name)
		}
		seen[v.Name] = true
		if IsTooling(v.Name) {
			t.Errorf("%s is both a setting and a tooling variable", v.Name)
		}
	}
	for _, name := range []string{"SECKILL_API_ADDR", "SECKILL_DEV", "SECKILL_RECONCILE_GRACE", "SECKILL_REDIS_SENTINEL_MASTER"} {
		if !seen[name] {
			t.Errorf("Variables() misses %s", name)
		}
	}
	secrets := map[string]bool{}
	for _, v := range vs {
		if v.Secret {
			secrets[v.Name] = true
		}
	}
	for _, name := range []string{"SECKILL_JWT_SECRET", "SECKILL_MYSQL_PASSWORD", "SECKILL_REDIS_PASSWORD", "SECKILL_TEMPORAL_API_KEY",
		"SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET", "SECKILL_PAYMENT_STRIPE_WEBHOOK_SECRET_PREVIOUS"} {
		if !secrets[name] {
			t.Errorf("%s is not marked secret", name)
		}
	}
}

var variableName = regexp.MustCompile(`\bSECKILL_[A-Z0-9_]*[A-Z0-9]\b`)

// Every SECKILL_* name written in the repository (scripts, docs, manifests,
// code) is a setting or a listed tooling variable: a script that exported a
// new one would otherwise make every seckill it starts refuse to run, and a
// doc naming a setting that does not exist misleads.
func TestRepositoryNamesOnlyKnownVariables(t *testing.T) {
	known := map[string]bool{}
	for _, v := range Variables() {
		known[v.Name] = true
	}
	root := ".."
	where := map[string][]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".stack", "bench-results", "node_modules", "bin":
				return filepath.SkipDir
			}
			return nil
		}
		if path == filepath.Join(root, "config", "variables_test.go") || !d.Type().IsRegular() {
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".yml", ".yaml", ".env", ".conf", ".json", "":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // a binary (a built seckill left in the tree)
		}
		for _, name := range variableName.FindAllString(string(b), -1) {
			if !known[name] && !IsTooling(name) {
				where[name] = append(where[name], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(where))
	for n := range where {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Errorf("%s (in %s) is neither a setting of config.Config nor in config.ToolingVariables", n, strings.Join(uniq(where[n]), ", "))
	}
}

func uniq(s []string) []string {
	sort.Strings(s)
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}
