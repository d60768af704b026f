// Package docs_test keeps the documentation true to the code where a test
// can: the README's settings table against config, and the runbook's alert
// sections against deploy/prometheus/rules.yml.
package docs_test

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/seckill/seckill/config"
)

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of the markdown section whose heading starts with
// heading, up to the next heading of the same or a higher level.
func section(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, "\n"+heading)
	if i < 0 {
		t.Fatalf("no section %q", heading)
	}
	rest := doc[i+1:]
	level := strings.Count(strings.Fields(heading)[0], "#")
	lines := strings.Split(rest, "\n")
	for n, l := range lines[1:] {
		if h := strings.Fields(l); len(h) > 0 && strings.Trim(h[0], "#") == "" && len(h[0]) <= level {
			return strings.Join(lines[:n+1], "\n")
		}
	}
	return rest
}

// Every alert of rules.yml has its entry in the runbook's alert section, and
// the runbook describes no alert that does not exist.
func TestRunbookHasEveryAlert(t *testing.T) {
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert string `json:"alert"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "../deploy/prometheus/rules.yml")), &rules); err != nil {
		t.Fatal(err)
	}
	var alerts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatal("no alerts in rules.yml")
	}
	sec := section(t, read(t, "runbook.md"), "## Alerts")
	var documented []string
	for _, m := range regexp.MustCompile(`(?m)^- \*\*(\w+)\*\* —`).FindAllStringSubmatch(sec, -1) {
		documented = append(documented, m[1])
	}
	for _, a := range alerts {
		if !slices.Contains(documented, a) {
			t.Errorf("alert %s has no entry (\"- **%s** — ...\") in docs/runbook.md's Alerts section", a, a)
		}
	}
	for _, d := range documented {
		if !slices.Contains(alerts, d) {
			t.Errorf("docs/runbook.md describes alert %s, which rules.yml does not have", d)
		}
	}
}

// The README's settings table names real settings, and each default it
// states is the one config applies: the stated value, loaded as that
// setting, leaves the configuration exactly as the defaults do.
func TestReadmeSettingsTableMatchesConfig(t *testing.T) {
	sec := section(t, read(t, "../README.md"), "## Configuration")
	known := map[string]bool{}
	for _, v := range config.Variables() {
		known[v.Name] = true
	}
	defaults, err := config.LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	code := regexp.MustCompile("`([^`]*)`")
	rows := 0
	for _, line := range strings.Split(sec, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.Contains(cells[1], "`SECKILL_") {
			continue
		}
		rows++
		// Names: full names and `_PORT`-style tails separated by " / "; a
		// tail takes the section of the name before it (SECKILL_MYSQL_).
		var names []string
		var base string
		for _, m := range code.FindAllStringSubmatch(cells[1], -1) {
			n := m[1]
			switch {
			case strings.HasPrefix(n, "SECKILL_"):
				parts := strings.SplitN(strings.TrimPrefix(n, "SECKILL_"), "_", 2)
				base = "SECKILL_" + parts[0] + "_"
			case strings.HasPrefix(n, "_") && base != "":
				n = base + strings.TrimPrefix(n, "_")
			default:
				t.Errorf("README row %q: %q is not a variable", strings.TrimSpace(cells[1]), n)
				continue
			}
			if !known[n] {
				t.Errorf("README names %s, which is not a setting of config.Config", n)
			}
			names = append(names, n)
		}
		// Defaults: the leading `...` / `...` of the second cell, one per
		// name; "empty", "off" and the like are checked as the empty value.
		def := strings.TrimSpace(cells[2])
		var values []string
		for _, part := range strings.Split(leading(def), " / ") {
			part = strings.TrimSpace(part)
			if m := code.FindStringSubmatch(part); m != nil && strings.HasPrefix(part, "`") {
				values = append(values, m[1])
			} else if strings.HasPrefix(part, "empty") || strings.HasPrefix(part, "off") {
				values = append(values, "")
			}
		}
		if len(values) != len(names) {
			t.Errorf("README row %v: %d defaults for %d names in %q", names, len(values), len(names), def)
			continue
		}
		for i, n := range names {
			env := map[string]string{}
			if values[i] != "" {
				env[n] = values[i]
			}
			c, err := config.LoadFrom(env)
			if err != nil {
				t.Errorf("README default of %s, %q, does not load: %v", n, values[i], err)
				continue
			}
			if !reflect.DeepEqual(c, defaults) {
				t.Errorf("README says %s defaults to %q; config's default differs", n, values[i])
			}
		}
	}
	if rows < 10 {
		t.Fatalf("found %d setting rows in the README's Configuration section; did its table move?", rows)
	}
}

// leading is the cell's text before its first colon outside backquotes (the
// stated defaults; the explanation follows the colon).
func leading(cell string) string {
	quoted := false
	for i, r := range cell {
		switch {
		case r == '`':
			quoted = !quoted
		case r == ':' && !quoted:
			return cell[:i]
		}
	}
	return cell
}
