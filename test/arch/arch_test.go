// Package arch holds the house's layering, checked: every import between the
// repository's packages points down, the foundation (internal/) imports no
// domain package, the test kit is imported by tests only, the bench's code
// by its binary and the suites that drive sales with it, the Stripe stand-in
// by its binary and tests, and the production binary links none of the
// API's callers' code (the generated client) and no stand-in of Stripe.
package arch

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/seckill/seckill/"

// layers: the production packages from the floor up. A package imports only
// packages of a lower layer. A new package gets its place here.
var layers = [][]string{
	{"order", "config", "web", "migrations", "auth", "internal/keyspace", "internal/proc", "internal/nemesis", "payment/provider"}, // vocabulary, settings, leaves
	{"ledger"},    // the money rules: the order's, payments' and refunds' state machine
	{"apiclient"}, // the API's generated client, for the demo, the bench and tests (never in cmd/seckill)
	{"internal/redisx", "internal/temporalx", "store", "queue", "payment/provider/stripepay", "payment/provider/testpay"}, // clients of one service
	{"payment/provider/standin"}, // the Stripe stand-in, served by cmd/seckill-stripe (never in cmd/seckill)
	{"orderstatus", "outbox", "activities", "compensation", "events"},
	{"stock", "workflows", "relay"},
	{"snapshot", "payment"},
	{"books"},           // an item's money, judged on its snapshot
	{"payment/cashier"}, // the door's provider payments: checkout and notifications
	{"api/apierr"},      // the api's error answers, shared by its jobs
	{"api/controlroom", "api/sale", "api/orders", "api/payhook", "api/support"}, // the api's jobs, composed by api
	{"api/purchase"}, // a job that reads sale's item read model
	{"invariant", "reconcile", "api"},
	{"worker"},
	{"cmd/seckill", "cmd/seckill-demo", "cmd/seckill-bench/bench", "cmd/seckill-nemesis", "cmd/seckill-stripe"},
	{"cmd/seckill-bench"},
}

// roof: packages above every layer, importing anything and imported by
// tests only (their own package is tests, or a kit for them).
var roof = []string{"testkit", "stock/stocktwin", "auth/oidctest"}

type pkg struct {
	ImportPath string
	Dir        string
	Imports    []string
	GoFiles    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = "../.."
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, errb.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bufio.NewReader(&out))
	for dec.More() {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func layerOf(path string) int {
	for i, l := range layers {
		if slices.Contains(l, path) {
			return i
		}
	}
	if slices.Contains(roof, path) {
		return len(layers)
	}
	return -1
}

// isTestOnly: a package whose only files are tests (test/..., docs, deploy's
// checks), or the kit tests share.
func isTestOnly(p pkg) bool { return len(p.GoFiles) == 0 || slices.Contains(roof, p.ImportPath) }

func TestImportsPointDown(t *testing.T) {
	for _, p := range listPackages(t) {
		if isTestOnly(p) && !slices.Contains(roof, p.ImportPath) {
			continue // tests import what they test
		}
		from := layerOf(p.ImportPath)
		if from < 0 {
			t.Errorf("package %s has no layer: give it one in test/arch/arch_test.go", p.ImportPath)
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			imp = strings.TrimPrefix(imp, module)
			if slices.Contains(roof, imp) {
				t.Errorf("%s imports %s, which only tests may import", p.ImportPath, imp)
				continue
			}
			if to := layerOf(imp); to < 0 || to >= from {
				t.Errorf("%s (layer %d) imports %s (layer %d): an import that runs up or sideways", p.ImportPath, from, imp, to)
			}
		}
	}
}

// The foundation imports nothing of the house but the settings.
func TestFoundationImportsNoDomainPackage(t *testing.T) {
	for _, p := range listPackages(t) {
		if !strings.HasPrefix(p.ImportPath, "internal/") {
			continue
		}
		for _, imp := range p.Imports {
			if rest, ok := strings.CutPrefix(imp, module); ok && rest != "config" && !strings.HasPrefix(rest, "internal/") {
				t.Errorf("foundation package %s imports the domain package %s", p.ImportPath, rest)
			}
		}
	}
}

// The bench's code is linked by the bench binary alone (the cluster and
// secure suites drive their sales with it too).
func TestBenchImportedByItsBinaryOnly(t *testing.T) {
	const bench = module + "cmd/seckill-bench/bench"
	for _, p := range listPackages(t) {
		if p.ImportPath != "cmd/seckill-bench" && !isTestOnly(p) && slices.Contains(p.Imports, bench) {
			t.Errorf("%s imports the bench's code", p.ImportPath)
		}
	}
}

// The Stripe stand-in is linked by its own binary alone (tests drive it
// too): a shop's processes reach it over HTTP, as they reach Stripe.
func TestStandinImportedByItsBinaryOnly(t *testing.T) {
	const standin = module + "payment/provider/standin"
	for _, p := range listPackages(t) {
		if p.ImportPath != "cmd/seckill-stripe" && !isTestOnly(p) && slices.Contains(p.Imports, standin) {
			t.Errorf("%s imports the Stripe stand-in", p.ImportPath)
		}
	}
}

// The production binary links no client of its own API: the generated
// client (docs/openapi.yaml's) is for the demo sale, the bench and tests;
// nor the network faults' tool (seckill-nemesis), a binary of its own, nor
// the Stripe stand-in, which only development runs.
func TestProductionBinaryLinksNoClient(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "./cmd/seckill")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/seckill: %v", err)
	}
	for dep := range strings.Lines(string(out)) {
		dep = strings.TrimSpace(dep)
		for _, not := range []string{"apiclient", "testkit", "cmd/seckill-bench/bench", "cmd/seckill-demo", "internal/nemesis", "cmd/seckill-nemesis",
			"cmd/seckill-stripe", "payment/provider/standin"} {
			if dep == module+not {
				t.Errorf("cmd/seckill links %s", not)
			}
		}
	}
}

// maxFuncLines: no hand-written non-test function is longer; one that
// grows past it is split by what its parts do.
const maxFuncLines = 100

func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	for _, p := range listPackages(t) {
		for _, name := range p.GoFiles {
			path := filepath.Join(p.Dir, name)
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if ast.IsGenerated(f) {
				continue
			}
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
					t.Errorf("%s: %s is %d lines (at most %d)", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
				}
			}
		}
	}
}
