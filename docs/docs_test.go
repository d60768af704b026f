// Package docs_test keeps the documentation true to the code where a test
// can: the README's settings table against config, the runbook's alert
// sections against deploy/prometheus/rules.yml, and the settings, metrics and
// API routes the documents name against the code, both ways (the routes of
// the router against docs/openapi.yaml are api's TestOpenAPIMatchesRoutes).
package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/ledger"
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

// docs are the reference documents, by path from this directory: what the
// settings, metrics and routes they name must match. docs/history/ is a
// record of the past and names what no longer exists.
func docs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"../README.md": read(t, "../README.md"), "openapi.yaml": read(t, "openapi.yaml")}
	mds, err := filepath.Glob("*.md")
	if err != nil || len(mds) < 4 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(mds))
	}
	for _, p := range mds {
		out[p] = read(t, p)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	// A full name; one followed by * or < is a pattern (SECKILL_MYSQL_*).
	fullName = regexp.MustCompile(`SECKILL_[A-Z0-9_]*[A-Z0-9](?:_?[*<])?`)
	// A tail in backquotes, `_BURST`, standing for a name like the last full
	// name before it on its line (SECKILL_API_BUYER_RPS / `_BUYER_BURST`).
	tailName = regexp.MustCompile("`(_[A-Z][A-Z0-9_]*[A-Z0-9])`")
)

// namedSettings returns the SECKILL_* variables doc names, full or as tails
// (each resolved against the full name before it on its line), and the names
// that resolve to no setting or tooling variable.
func namedSettings(doc string, known func(string) bool) (named, unknown []string) {
	for _, line := range strings.Split(doc, "\n") {
		type hit struct {
			at   int
			name string
			tail bool
		}
		var hits []hit
		for _, m := range fullName.FindAllStringIndex(line, -1) {
			if n := line[m[0]:m[1]]; !strings.HasSuffix(n, "*") && !strings.HasSuffix(n, "<") {
				hits = append(hits, hit{m[0], n, false})
			}
		}
		for _, m := range tailName.FindAllStringSubmatchIndex(line, -1) {
			hits = append(hits, hit{m[2], line[m[2]:m[3]], true})
		}
		sort.Slice(hits, func(i, j int) bool { return hits[i].at < hits[j].at })
		last := ""
		for _, h := range hits {
			if !h.tail {
				last = h.name
				if known(h.name) {
					named = append(named, h.name)
				} else {
					unknown = append(unknown, h.name)
				}
				continue
			}
			if last == "" {
				continue // a tail of a pattern, or of prose: nothing to resolve it against
			}
			if n, ok := resolveTail(last, h.name, known); ok {
				named = append(named, n)
			} else {
				unknown = append(unknown, last+" / "+h.name)
			}
		}
	}
	return named, unknown
}

// resolveTail turns tail into a name beside full: its last segments replaced
// (SECKILL_MYSQL_HOST / _PORT), the tail in full's section
// (SECKILL_REDIS_TLS / _TLS_CA), or full extended (..._SIGNING_KEY / _PREVIOUS).
func resolveTail(full, tail string, known func(string) bool) (string, bool) {
	segs := strings.Split(full, "_")
	tsegs := strings.Split(strings.TrimPrefix(tail, "_"), "_")
	var candidates []string
	if len(segs)-len(tsegs) >= 2 {
		candidates = append(candidates, strings.Join(segs[:len(segs)-len(tsegs)], "_")+tail)
	}
	candidates = append(candidates, segs[0]+"_"+segs[1]+tail, full+tail)
	for _, c := range candidates {
		if known(c) {
			return c, true
		}
	}
	return "", false
}

// Every setting of config is in the docs (config's package comment promises
// it), and every SECKILL_* variable the docs name is a setting or a variable
// of the scripts and tests.
func TestDocsNameEverySetting(t *testing.T) {
	settings := map[string]bool{}
	for _, v := range config.Variables() {
		settings[v.Name] = true
	}
	known := func(n string) bool { return settings[n] || config.IsTooling(n) }
	documented := map[string]bool{}
	all := docs(t)
	for _, path := range sortedKeys(all) {
		named, unknown := namedSettings(all[path], known)
		for _, n := range named {
			documented[n] = true
		}
		for _, n := range unknown {
			t.Errorf("%s names %s, which is no setting of config.Config nor a tooling variable (config.ToolingVariables)", path, n)
		}
	}
	for _, n := range sortedKeys(settings) {
		if !documented[n] {
			t.Errorf("setting %s is in no doc: describe it in README.md's settings table or docs/deploy.md", n)
		}
	}
}

// metricName is what a seckill metric is called; the Prometheus suffixes of a
// histogram's series are the histogram's.
var (
	metricName      = regexp.MustCompile(`^seckill_[a-z0-9_]*[a-z0-9]$`)
	metricInText    = regexp.MustCompile(`\bseckill_[a-z0-9_]*[a-z0-9]\b`)
	histogramSuffix = regexp.MustCompile(`_(bucket|sum|count)$`)
)

// notMetrics are seckill_* names the docs use for other things.
var notMetrics = map[string]string{
	"seckill_order": "the orders' MySQL table",
	"seckill_bench": "the bench's MySQL database",
}

// codeMetrics returns the metric names the module's non-test Go code
// registers: every seckill_* string literal passed to a call
// (counter("seckill_x", ...), prometheus.NewDesc) or set as a Name field
// (prometheus.CounterOpts{Name: ...}), with the file that holds it.
func codeMetrics(t *testing.T) map[string]string {
	t.Helper()
	found := map[string]string{}
	literal := func(e ast.Expr, file string) {
		if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if v, err := strconv.Unquote(lit.Value); err == nil && metricName.MatchString(v) && notMetrics[v] == "" {
				found[v] = file
			}
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != ".." && (strings.HasPrefix(n, ".") || n == "testdata" || n == "vendor" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				for _, a := range n.Args {
					literal(a, path)
				}
			case *ast.KeyValueExpr:
				if k, ok := n.Key.(*ast.Ident); ok && k.Name == "Name" {
					literal(n.Value, path)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) < 20 {
		t.Fatalf("found %d seckill_* metrics in the code (%v): did their registration change shape?", len(found), sortedKeys(found))
	}
	return found
}

// Every metric the code registers feeds an alert or recording rule of
// deploy/prometheus/rules.yml or is in the runbook's list of metrics without
// an alert (with why); every seckill_* metric the docs, the rules and the
// dashboard name exists.
func TestDocsNameEveryMetric(t *testing.T) {
	code := codeMetrics(t)
	rules := read(t, "../deploy/prometheus/rules.yml")
	texts := docs(t)
	texts["../deploy/prometheus/rules.yml"] = rules
	texts["../deploy/grafana/seckill.json"] = read(t, "../deploy/grafana/seckill.json")
	for _, path := range sortedKeys(texts) {
		seen := map[string]bool{}
		for _, n := range metricInText.FindAllString(texts[path], -1) {
			if seen[n] || notMetrics[n] != "" {
				continue
			}
			seen[n] = true
			if _, ok := code[n]; ok {
				continue
			}
			if base := histogramSuffix.ReplaceAllString(n, ""); base != n {
				if _, ok := code[base]; ok {
					continue
				}
			}
			t.Errorf("%s names metric %s, which the code does not register", path, n)
		}
	}
	alerted := map[string]bool{}
	for _, n := range metricInText.FindAllString(rules, -1) {
		alerted[histogramSuffix.ReplaceAllString(n, "")] = true
		alerted[n] = true
	}
	listed := map[string]bool{}
	for _, n := range metricInText.FindAllString(section(t, read(t, "runbook.md"), "## Metrics without an alert"), -1) {
		listed[n] = true
	}
	for _, n := range sortedKeys(code) {
		if !alerted[n] && !listed[n] {
			t.Errorf("metric %s (%s) feeds no rule of rules.yml and is not in docs/runbook.md's \"Metrics without an alert\": give it an alert or say there why not", n, code[n])
		}
	}
}

// Every API route the docs name (a method, then a path under /api/) is an
// operation of docs/openapi.yaml, which api's TestOpenAPIMatchesRoutes keeps
// equal to the router. Path parameters may be written :id, <id>, {id} or as
// an example value (42, 01J...).
func TestDocsNameOnlyRoutes(t *testing.T) {
	var spec struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal([]byte(read(t, "openapi.yaml")), &spec); err != nil {
		t.Fatal(err)
	}
	type op struct{ method, path string }
	var ops []op
	for p, item := range spec.Paths {
		for m := range item {
			ops = append(ops, op{strings.ToUpper(m), p})
		}
	}
	if len(ops) < 15 {
		t.Fatalf("found %d operations in openapi.yaml", len(ops))
	}
	matches := func(method, path string) bool {
		segs := strings.Split(strings.TrimSuffix(path, "/"), "/")
		for _, o := range ops {
			osegs := strings.Split(o.path, "/")
			if o.method != method || len(osegs) != len(segs) {
				continue
			}
			same := true
			for i, s := range osegs {
				if s != segs[i] && !strings.HasPrefix(s, "{") {
					same = false
					break
				}
			}
			if same {
				return true
			}
		}
		return false
	}
	route := regexp.MustCompile("\\b(GET|POST|PUT|PATCH|DELETE) `?(/api/[A-Za-z0-9_/:{}<>.-]*[A-Za-z0-9_}>])")
	all := docs(t)
	n := 0
	for _, path := range sortedKeys(all) {
		for _, m := range route.FindAllStringSubmatch(all[path], -1) {
			n++
			if !matches(m[1], m[2]) {
				t.Errorf("%s names %s %s, which is not an operation of docs/openapi.yaml", path, m[1], m[2])
			}
		}
	}
	if n < 10 {
		t.Fatalf("found %d routes named in the docs", n)
	}
}

// performance.md stays a reference (method, latest figures, what bounds each
// stage, how to reproduce) of at most 200 lines; dated analyses go to
// docs/history/performance-notes.md, and its links to them resolve.
func TestPerformanceDocIsAReference(t *testing.T) {
	doc := read(t, "performance.md")
	if n := strings.Count(doc, "\n"); n > 200 {
		t.Errorf("performance.md has %d lines; keep it to 200 and move dated analyses to history/performance-notes.md", n)
	}
	history := read(t, "history/performance-notes.md")
	anchors := map[string]bool{}
	for _, l := range strings.Split(history, "\n") {
		if h, ok := strings.CutPrefix(l, "## "); ok {
			a := strings.Map(func(r rune) rune {
				switch {
				case r == ' ':
					return '-'
				case r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					return r
				}
				return -1
			}, strings.ToLower(h))
			anchors[a] = true
		}
	}
	links := regexp.MustCompile(`history/performance-notes\.md#([a-z0-9-]+)`).FindAllStringSubmatch(doc, -1)
	if len(links) == 0 {
		t.Fatal("performance.md links no history section")
	}
	for _, m := range links {
		if !anchors[m[1]] {
			t.Errorf("performance.md links history/performance-notes.md#%s: no such section", m[1])
		}
	}
}

// payments.md prints the ledger's table of allowed transitions, row for row.
func TestPaymentsDocPrintsTheLedgersTable(t *testing.T) {
	b, err := os.ReadFile("payments.md")
	if err != nil {
		t.Fatal(err)
	}
	var got []ledger.Transition
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case line == "| fact | from | to | what makes it |":
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			cells := strings.Split(strings.Trim(line, "| "), " | ")
			if len(cells) != 4 {
				t.Fatalf("ledger table row %q: want 4 cells", line)
			}
			from := strings.Trim(cells[1], "`")
			if from == "(new row)" {
				from = ledger.New
			}
			got = append(got, ledger.Transition{Fact: ledger.Fact(cells[0]), From: from, To: strings.Trim(cells[2], "`"), By: cells[3]})
		case in:
			in = false
		}
	}
	if !slices.Equal(got, ledger.Table) {
		t.Errorf("payments.md's ledger table (%d rows) is not ledger.Table (%d rows): print it again from the code", len(got), len(ledger.Table))
	}
}
