// Package deploy checks the monitoring files in deploy/ against the code: every
// metric a dashboard panel or a Prometheus rule queries is one the API or the
// worker exports.
package deploy

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/seckill/seckill/testkit"
)

func repoRoot(t *testing.T) string { return testkit.RepoRoot(t) }

var metricName = regexp.MustCompile(`seckill_[a-z0-9_]+`)

// exported collects the metric names the code registers, in the files of the
// API, its jobs, its relay, the worker and its events publisher (Name: "seckill_...",
// NewDesc("seckill_...") and the worker's counter/gauge("seckill_...", help)).
func exported(t *testing.T) map[string]bool {
	names := map[string]bool{}
	def := regexp.MustCompile(`(?:Name:\s*|NewDesc\(|counters?\(|gauge\()"(seckill_[a-z0-9_]+)"`)
	for _, f := range []string{"api/metrics.go", "api/sale/cache.go", "api/purchase/purchase.go", "api/controlroom/room.go", "relay/metrics.go", "worker/metrics.go", "events/metrics.go", "payment/cashier/notify.go"} {
		b, err := os.ReadFile(filepath.Join(repoRoot(t), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range def.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d metric definitions: %v", len(names), names)
	}
	return names
}

// known accepts a queried name: an exported metric, a histogram's series, or
// a recording rule.
func known(names map[string]bool, q string) bool {
	for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
		if len(q) > len(suffix) && names[q[:len(q)-len(suffix)]] && q[len(q)-len(suffix):] == suffix {
			return true
		}
	}
	return false
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "grafana", "seckill.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Panels) < 7 {
		t.Fatalf("%d panels", len(d.Panels))
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, q := range metricName.FindAllString(tg.Expr, -1) {
				if !known(names, q) {
					t.Errorf("panel %q queries %s, which nothing exports", p.Title, q)
				}
			}
		}
	}
}

func TestRulesQueryExportedMetrics(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "prometheus", "rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	// Every seckill_ name in the file (expressions span lines; recording
	// rules are named seckill:..., with colons, and do not match).
	qs := metricName.FindAllString(string(b), -1)
	if len(qs) < 8 {
		t.Fatalf("found only %d metric references in rules.yml", len(qs))
	}
	for _, q := range qs {
		if !known(names, q) {
			t.Errorf("rules.yml queries %s, which nothing exports", q)
		}
	}
}
