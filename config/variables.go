package config

import (
	"cmp"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
)

// Prefix starts every variable of Config.
const Prefix = "SECKILL_"

// Variable is one SECKILL_* environment variable of Config.
type Variable struct {
	Name   string // e.g. SECKILL_API_ADDR
	Secret bool   // a Secret field: never printed, kept out of config maps
}

// Variables lists every variable Config reads, derived from its struct tags.
func Variables() []Variable {
	var vs []Variable
	secret := reflect.TypeFor[Secret]()
	eachSetting(reflect.ValueOf(Config{}), Prefix, func(name string, f reflect.StructField, _ reflect.Value) {
		vs = append(vs, Variable{Name: name, Secret: f.Type == secret})
	})
	slices.SortFunc(vs, func(a, b Variable) int { return strings.Compare(a.Name, b.Name) })
	return vs
}

// eachSetting calls fn with the name, field and value of every setting in v.
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

// ToolingVariables are the SECKILL_* variables of this repository's scripts
// and tests: the misspelling check lets them pass.
var ToolingVariables = []string{
	"SECKILL_CACHE_DIR", "SECKILL_STACK_DIR", "SECKILL_STACK_LOG_LINES", "SECKILL_STACK_PROFILE",
	"SECKILL_REDIS_PORT", "SECKILL_ROCKETMQ_NAMESRV_PORT", "SECKILL_ROCKETMQ_BROKER_PORT",
	"SECKILL_TEMPORAL_PORT", "SECKILL_TEMPORAL_UI_PORT", "SECKILL_PROMETHEUS_PORT",
	"SECKILL_TEMPORAL_UI", "SECKILL_TEMPORAL_CLI",
	"SECKILL_API_URL", "SECKILL_REQUIRE_PROMTOOL", "SECKILL_REQUIRE_BROWSER",
	"SECKILL_FAILOVER", "SECKILL_FAILOVER_OUTAGE_SECONDS", "SECKILL_MONEY_FAULT_UNITS", "SECKILL_CLUSTER", "SECKILL_SECURE",
	"SECKILL_SAGA_BENCH", "SECKILL_SAGA_BENCH_N", "SECKILL_RECORD_HISTORIES",
	"SECKILL_CHROMIUM", "SECKILL_BROWSER_OUT", "SECKILL_BROWSER_DOCS",
	"SECKILL_STRIPE_MOCK_BIN", "SECKILL_REQUIRE_STRIPE_MOCK",
	"SECKILL_PROPERTY_SEED", "SECKILL_PROPERTY_RUNS", "SECKILL_PROPERTY_STEPS",
}

// IsTooling reports whether name is a variable of the scripts and tests.
func IsTooling(name string) bool {
	return slices.Contains(ToolingVariables, name) || strings.HasPrefix(name, "SECKILL_CLUSTER_")
}

// checkNames refuses SECKILL_* variables that are neither settings nor tooling.
func checkNames(environ map[string]string) error {
	var names, msgs []string
	for _, v := range Variables() {
		names = append(names, v.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(environ)) {
		if strings.HasPrefix(k, Prefix) && !slices.Contains(names, k) && !IsTooling(k) {
			// the nearest by edit distance, the first of equals
			near := slices.MinFunc(names, func(a, b string) int { return cmp.Compare(editDistance(k, a), editDistance(k, b)) })
			msgs = append(msgs, fmt.Sprintf("%s is not a setting (did you mean %s?)", k, near))
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("unknown SECKILL_* variable: %s; `seckill config` lists the settings", strings.Join(msgs, "; "))
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
