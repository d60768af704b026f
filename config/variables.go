package config

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// Prefix starts every variable of Config.
const Prefix = "SECKILL_"

// Variable is one SECKILL_* environment variable of Config.
type Variable struct {
	Name   string // e.g. SECKILL_API_ADDR
	Secret bool   // a Secret field: never printed, kept out of config maps
}

// Variables lists every variable Config reads, derived from its struct tags,
// so a field added to Config is known here (and to the misspelling check,
// the Kubernetes manifests' test and the README's) without another list.
func Variables() []Variable {
	var vs []Variable
	secret := reflect.TypeFor[Secret]()
	eachSetting(reflect.ValueOf(Config{}), Prefix, func(name string, f reflect.StructField, _ reflect.Value) {
		vs = append(vs, Variable{Name: name, Secret: f.Type == secret})
	})
	sort.Slice(vs, func(i, j int) bool { return vs[i].Name < vs[j].Name })
	return vs
}

// eachSetting calls fn with the variable name (after prefix), the field and
// the value of every setting in the struct v, nested sections included.
func eachSetting(v reflect.Value, prefix string, fn func(name string, f reflect.StructField, v reflect.Value)) {
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if p, ok := f.Tag.Lookup("envPrefix"); ok && f.Type.Kind() == reflect.Struct {
			eachSetting(v.Field(i), prefix+p, fn)
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" && name != "-" {
			fn(prefix+name, f, v.Field(i))
		}
	}
}

// ToolingVariables are SECKILL_* variables read by the scripts and tests of
// this repository, not by the seckill binary: they may be set in the
// environment seckill runs in (make test exports some; `scripts/stack env`
// prints some), so the misspelling check lets them pass. A test keeps this
// list and the repository's scripts in step.
var ToolingVariables = []string{
	// scripts: where installed tools live; scripts/stack's state, logs and profile (default or cluster)
	"SECKILL_CACHE_DIR", "SECKILL_STACK_DIR", "SECKILL_STACK_LOG_LINES", "SECKILL_STACK_PROFILE",
	// scripts/stack: the default profile's ports; `scripts/stack env` prints the UI and CLI (tests run it)
	"SECKILL_REDIS_PORT", "SECKILL_ROCKETMQ_NAMESRV_PORT", "SECKILL_ROCKETMQ_BROKER_PORT",
	"SECKILL_TEMPORAL_PORT", "SECKILL_TEMPORAL_UI_PORT", "SECKILL_PROMETHEUS_PORT",
	"SECKILL_TEMPORAL_UI", "SECKILL_TEMPORAL_CLI",
	// scripts/run; scripts/test and scripts/lint (test/browser fails without chromium)
	"SECKILL_API_URL", "SECKILL_REQUIRE_PROMTOOL", "SECKILL_REQUIRE_BROWSER",
	// test/failover, test/cluster, test/secure, the saga bench and the replay histories' recorder
	"SECKILL_FAILOVER", "SECKILL_FAILOVER_OUTAGE_SECONDS", "SECKILL_CLUSTER", "SECKILL_SECURE",
	"SECKILL_SAGA_BENCH", "SECKILL_SAGA_BENCH_N", "SECKILL_RECORD_HISTORIES",
	// test/browser: the browser to drive, where the screenshots go, copy the README's to docs/
	"SECKILL_CHROMIUM", "SECKILL_BROWSER_OUT", "SECKILL_BROWSER_DOCS",
	// payment/provider/stripepay's tests: the stripe-mock to start (scripts/stack stripe-mock), fail if missing
	"SECKILL_STRIPE_MOCK_BIN", "SECKILL_REQUIRE_STRIPE_MOCK",
}

// IsTooling reports whether name is a variable of the scripts and tests,
// SECKILL_CLUSTER_* included (the cluster profile's ports and sizes,
// scripts/lib/stack-cluster.sh).
func IsTooling(name string) bool {
	return slices.Contains(ToolingVariables, name) || strings.HasPrefix(name, "SECKILL_CLUSTER_")
}

// checkNames refuses SECKILL_* variables that are neither settings nor
// tooling: a misspelled setting would otherwise be ignored silently and its
// default used. The error names the nearest known setting.
func checkNames(environ map[string]string) error {
	known := map[string]bool{}
	var names []string
	for _, v := range Variables() {
		known[v.Name] = true
		names = append(names, v.Name)
	}
	var unknown []string
	for k := range environ {
		if strings.HasPrefix(k, Prefix) && !known[k] && !IsTooling(k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	var msgs []string
	for _, k := range unknown {
		msgs = append(msgs, fmt.Sprintf("%s is not a setting (did you mean %s?)", k, nearest(k, names)))
	}
	return fmt.Errorf("unknown SECKILL_* variable: %s; `seckill config` lists the settings", strings.Join(msgs, "; "))
}

// nearest is the name closest to s by edit distance (the first of equals).
func nearest(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		if d := editDistance(s, n); bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
