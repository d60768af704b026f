// Package kubernetes_test validates the Kubernetes manifests of this
// directory offline (no cluster): every overlay is built as `kubectl
// kustomize` would, every object is decoded strictly into its Kubernetes (or
// Prometheus Operator) Go type, unknown fields rejected, and the invariants
// the manifests promise are checked against the code and config they deploy.
//
// The PrometheusRule is generated from deploy/prometheus/rules.yml:
//
//	go test ./deploy/kubernetes -run TestPrometheusRuleMatchesRulesFile -update
package kubernetes_test

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
	"github.com/seckill/seckill/worker"
)

var update = flag.Bool("update", false, "rewrite components/monitoring/prometheusrule.yaml from deploy/prometheus/rules.yml")

const (
	rulesFile    = "../prometheus/rules.yml"
	ruleManifest = "components/monitoring/prometheusrule.yaml"
	// secretName is the Secret every role reads its secrets from. The
	// production overlay does not ship it (it comes from the secret store).
	secretName = "seckill-secrets"
)

// Measured peak RSS of a full sale (docs/performance.md, stage 4: the
// highest of the recorded runs), in bytes.
const (
	apiPeakRSS    = 125e6
	workerPeakRSS = 185e6
)

// Teardown bounds that are constants in cmd/seckill rather than settings.
const (
	workerSettle          = time.Second      // queue.settleAfterStart: a consumer's Close waits this long after its start
	workerMetricsShutdown = 10 * time.Second // shutdownHTTP in cmd/seckill/worker.go
	graceMargin           = 5 * time.Second
)

// objects is one overlay's output, decoded.
type objects struct {
	overlay      string
	namespaces   []*corev1.Namespace
	accounts     []*corev1.ServiceAccount
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	deployments  []*appsv1.Deployment
	services     []*corev1.Service
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	jobs         []*batchv1.Job
	monitors     []*monitoringv1.ServiceMonitor
	promRules    []*monitoringv1.PrometheusRule
	hasMonitorCR bool
}

func overlays(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob("overlays/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no overlays: %v", err)
	}
	return dirs
}

// eachOverlay builds every overlay and runs test on it, a subtest each.
func eachOverlay(t *testing.T, test func(t *testing.T, o objects)) {
	for _, dir := range overlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) { test(t, build(t, dir)) })
	}
}

// build runs kustomize on dir and decodes every object strictly.
func build(t *testing.T, dir string) objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := objects{overlay: dir}
	for _, r := range m.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		gvk := r.GetApiVersion() + "/" + r.GetKind()
		var obj any
		switch gvk {
		case "v1/Namespace":
			obj = add(&o.namespaces)
		case "v1/ServiceAccount":
			obj = add(&o.accounts)
		case "v1/ConfigMap":
			obj = add(&o.configMaps)
		case "v1/Secret":
			obj = add(&o.secrets)
		case "apps/v1/Deployment":
			obj = add(&o.deployments)
		case "v1/Service":
			obj = add(&o.services)
		case "policy/v1/PodDisruptionBudget":
			obj = add(&o.pdbs)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			obj = add(&o.hpas)
		case "batch/v1/Job":
			obj = add(&o.jobs)
		case "monitoring.coreos.com/v1/ServiceMonitor":
			obj, o.hasMonitorCR = add(&o.monitors), true
		case "monitoring.coreos.com/v1/PrometheusRule":
			obj, o.hasMonitorCR = add(&o.promRules), true
		default:
			t.Fatalf("%s: %s %s: no Go type registered in this test for it", dir, gvk, r.GetName())
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", dir, gvk, r.GetName(), err, b)
		}
	}
	return o
}

// add appends a new zero object to *list and returns it, for decoding into.
func add[T any](list *[]*T) *T {
	v := new(T)
	*list = append(*list, v)
	return v
}

// Every overlay builds, and every object in it is a known type whose fields
// all exist (a misspelled or misplaced field fails here, not on a cluster).
// The local try-out adds the Stripe stand-in.
func TestOverlaysBuildAndDecodeStrictly(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		want := 2
		if filepath.Base(o.overlay) == "local" {
			want = 3
			if o.deployment(standinComponent) == nil {
				t.Error("local: no Stripe stand-in Deployment")
			}
		} else if o.deployment(standinComponent) != nil {
			t.Errorf("%s: the Stripe stand-in is for the local try-out only", o.overlay)
		}
		if len(o.deployments) != want || o.deployment("api") == nil || o.deployment("worker") == nil || len(o.jobs) != 1 || len(o.hpas) != 1 {
			t.Fatalf("want the api and worker Deployments (and the Stripe stand-in's in local), the migrate Job and the API's HPA; got %d, %d, %d",
				len(o.deployments), len(o.jobs), len(o.hpas))
		}
	})
	// The strict decode rejects what it should.
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte("apiVersion: apps/v1\nkind: Deployment\nspec:\n  replica: 2\n"), &d); err == nil {
		t.Fatal("a misspelled field decoded")
	}
}

// find returns the first object in list that is, or nil.
func find[T any](list []*T, is func(*T) bool) *T {
	for _, v := range list {
		if is(v) {
			return v
		}
	}
	return nil
}

func (o objects) configMap(name string) *corev1.ConfigMap {
	return find(o.configMaps, func(c *corev1.ConfigMap) bool { return c.Name == name })
}

func (o objects) secret(name string) *corev1.Secret {
	return find(o.secrets, func(s *corev1.Secret) bool { return s.Name == name })
}

func (o objects) deployment(component string) *appsv1.Deployment {
	return find(o.deployments, func(d *appsv1.Deployment) bool {
		return d.Spec.Template.Labels["app.kubernetes.io/component"] == component
	})
}

// environment is what a container's process sees of SECKILL_*: its config
// maps and secrets (envFrom), then its own env. Values from the downward API
// are stood in for by a pod name.
func (o objects) environment(t *testing.T, c corev1.Container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		switch {
		case from.ConfigMapRef != nil:
			cm := o.configMap(from.ConfigMapRef.Name)
			if cm == nil {
				t.Fatalf("%s: container %s reads ConfigMap %s, which the overlay does not have", o.overlay, c.Name, from.ConfigMapRef.Name)
			}
			for k, v := range cm.Data {
				env[k] = v
			}
		case from.SecretRef != nil:
			s := o.secret(from.SecretRef.Name)
			if s == nil {
				if from.SecretRef.Name != secretName {
					t.Fatalf("%s: container %s reads Secret %s, which is neither in the overlay nor the documented %s",
						o.overlay, c.Name, from.SecretRef.Name, secretName)
				}
				continue // made from the secret store
			}
			for k, v := range s.Data {
				env[k] = string(v)
			}
			for k, v := range s.StringData {
				env[k] = v
			}
		default:
			t.Fatalf("%s: container %s: envFrom without a source", o.overlay, c.Name)
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = "seckill-api-5d8f7c9b4-x2x7q"
		default:
			env[e.Name] = "from-" + e.Name
		}
	}
	return env
}

// Every SECKILL_* name in the manifests is a setting of config.Config;
// secrets are only in Secrets and Secrets hold only secrets; and each
// container's whole environment loads and validates as the process would.
func TestEnvironmentIsRealConfig(t *testing.T) {
	vars := map[string]config.Variable{}
	for _, v := range config.Variables() {
		vars[v.Name] = v
	}
	eachOverlay(t, func(t *testing.T, o objects) {
		for _, cm := range o.configMaps {
			for k := range cm.Data {
				v, ok := vars[k]
				switch {
				case !ok:
					t.Errorf("ConfigMap %s: %s is not a setting", cm.Name, k)
				case v.Secret:
					t.Errorf("ConfigMap %s: %s is a secret: put it in the Secret %s", cm.Name, k, secretName)
				}
			}
		}
		for _, s := range o.secrets {
			for k := range s.Data {
				if v, ok := vars[k]; !ok || !v.Secret {
					t.Errorf("Secret %s: %s is not a secret setting (ok=%v)", s.Name, k, ok)
				}
			}
		}
		for _, c := range o.containers() {
			for _, e := range c.Env {
				v, ok := vars[e.Name]
				if !ok {
					t.Errorf("container %s: env %s is not a setting", c.Name, e.Name)
				}
				if v.Secret && e.ValueFrom == nil {
					t.Errorf("container %s: secret %s written in the manifest", c.Name, e.Name)
				}
			}
			if c.Name == standinComponent {
				continue // not a seckill role: its flags are checked by TestStandinWiredToTheAPI
			}
			env := o.environment(t, c)
			cfg, err := config.LoadFrom(env)
			if err != nil {
				t.Errorf("container %s: its environment does not load: %v", c.Name, err)
				continue
			}
			if cfg.Log.Format != "json" && !cfg.Dev {
				t.Errorf("container %s: SECKILL_LOG_FORMAT=%s outside development, want json", c.Name, cfg.Log.Format)
			}
		}
	})
}

// standinComponent is the Stripe stand-in's component (and container) name.
const standinComponent = "stripe-standin"

// In the local try-out the API and the worker reach the Stripe stand-in at
// its Service, and it sends its webhooks to the API's Service, signed with
// the secret the API verifies them with.
func TestStandinWiredToTheAPI(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		d := o.deployment(standinComponent)
		if d == nil {
			return
		}
		c := d.Spec.Template.Spec.Containers[0]
		flags := map[string]string{}
		for i := 0; i+1 < len(c.Args); i += 2 {
			flags[c.Args[i]] = c.Args[i+1]
		}
		port, ok := containerPort(c, "http", 0)
		if !ok || listenPort(t, flags["-addr"]) != port {
			t.Errorf("%s: listens on %q, its http port is %d", d.Name, flags["-addr"], port)
		}
		var svc *corev1.Service
		for _, s := range o.services {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				svc = s
			}
		}
		if svc == nil {
			t.Fatalf("%s: no Service", d.Name)
		}
		for _, component := range []string{"api", "worker"} {
			r := o.role(t, component)
			want := fmt.Sprintf("http://%s:%d", svc.Name, svc.Spec.Ports[0].Port)
			if r.cfg.Payment.Provider != "stripe" || r.cfg.Payment.Stripe.URL != want {
				t.Errorf("%s: provider %q at %q, want stripe at the stand-in's Service %s", r.dep.Name, r.cfg.Payment.Provider, r.cfg.Payment.Stripe.URL, want)
			}
			if got := r.cfg.Payment.Stripe.WebhookSecret.Value(); got != flags["-webhook-secret"] {
				t.Errorf("%s: verifies with another webhook secret than the stand-in signs with", r.dep.Name)
			}
		}
		api := o.role(t, "api")
		var apiSvc *corev1.Service
		for _, s := range o.services {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(api.dep.Spec.Template.Labels)) && len(s.Spec.Selector) > 0 {
				apiSvc = s
			}
		}
		if apiSvc == nil {
			t.Fatal("no API Service")
		}
		if want := fmt.Sprintf("http://%s:%d/api/v1/payments/notifications", apiSvc.Name, apiSvc.Spec.Ports[0].Port); flags["-webhook-url"] != want {
			t.Errorf("%s: webhooks to %q, want the API's Service %s", d.Name, flags["-webhook-url"], want)
		}
	})
}

// documentedSecrets are the names of the documented `kubectl create secret`
// command in an overlay's kustomization.yaml (--from-literal=NAME=...).
func documentedSecrets(t *testing.T, overlay string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(overlay, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range regexp.MustCompile(`--from-literal=(SECKILL_\w+)=`).FindAllSubmatch(b, -1) {
		names = append(names, string(m[1]))
	}
	return names
}

// The API signs order messages and the worker's consumer accepts only what
// its key signs: both read SECKILL_ROCKETMQ_ORDER_SIGNING_KEY from the same
// Secret, and start with it (outside development, a key of the production
// shape; where the overlay does not ship the Secret, the documented command
// that creates it sets the key).
func TestOrderSigningKeyReachesAPIAndWorker(t *testing.T) {
	const key = "SECKILL_ROCKETMQ_ORDER_SIGNING_KEY"
	eachOverlay(t, func(t *testing.T, o objects) {
		keys := map[string]string{}
		for _, component := range []string{"api", "worker"} {
			r := o.role(t, component)
			env := o.environment(t, r.c)
			reads := false
			for _, from := range r.c.EnvFrom {
				if from.SecretRef == nil || !strings.HasPrefix(from.SecretRef.Name, secretName) {
					continue // a generated Secret's name has a hash suffix
				}
				reads = true
				if o.secret(from.SecretRef.Name) != nil {
					continue
				}
				// Made from the secret store: as the documented command does.
				documented := documentedSecrets(t, o.overlay)
				for _, n := range []string{key, "SECKILL_JWT_SECRET"} {
					if !slices.Contains(documented, n) {
						t.Fatalf("%s: the documented command that creates the Secret %s sets %v, not %s", o.overlay, secretName, documented, n)
					}
					env[n] = strings.Repeat("0f", 32) // openssl rand -hex 32
				}
			}
			if !reads {
				t.Fatalf("%s: the %s does not read the Secret %s", o.overlay, component, secretName)
			}
			if _, ok := env[key]; !ok {
				t.Errorf("%s: the %s's environment has no %s: it would sign (or check) with the published default", o.overlay, component, key)
			}
			cfg, err := config.LoadFrom(env)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.CheckOrderSigningKey(); err != nil {
				t.Errorf("%s: the %s would refuse to start: %v", o.overlay, component, err)
			}
			keys[component] = cfg.RocketMQ.OrderSigningKey.Value()
		}
		if keys["api"] != keys["worker"] {
			t.Errorf("%s: the api and the worker have different order signing keys", o.overlay)
		}
	})
}

// pods are the pod specs of the Deployments and Jobs, by object name.
func (o objects) pods() map[string]corev1.PodSpec {
	pods := map[string]corev1.PodSpec{}
	for _, d := range o.deployments {
		pods[d.Name] = d.Spec.Template.Spec
	}
	for _, j := range o.jobs {
		pods[j.Name] = j.Spec.Template.Spec
	}
	return pods
}

func (o objects) containers() []corev1.Container {
	var cs []corev1.Container
	for _, p := range o.pods() {
		cs = append(cs, p.Containers...)
	}
	return cs
}

// role is one Deployment's container and the config it runs with.
type role struct {
	dep *appsv1.Deployment
	c   corev1.Container
	cfg config.Config
}

func (o objects) role(t *testing.T, component string) role {
	t.Helper()
	d := o.deployment(component)
	if d == nil {
		t.Fatalf("%s: no Deployment of component %s", o.overlay, component)
	}
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%s: %d containers, want 1", d.Name, n)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != component {
		t.Fatalf("%s: args %v, want the %s subcommand", d.Name, c.Args, component)
	}
	cfg, err := config.LoadFrom(o.environment(t, c))
	if err != nil {
		t.Fatalf("%s: %v", d.Name, err)
	}
	return role{dep: d, c: c, cfg: cfg}
}

type (
	stubItems  struct{ api.ItemStore }
	stubStock  struct{ api.StockFence }
	stubOrders struct{ api.OrderReader }
	stubUnits  struct{ api.Units }
	stubViews  struct{ api.Views }
	stubTokens struct{ api.Tokens }
)

// newAPI builds the real API server on stubs that are never called (routes
// and listeners are all the tests here look at).
func newAPI(cfg config.Config) *api.Server {
	return api.New(cfg.API, api.Deps{
		Items: stubItems{}, Stock: stubStock{}, Orders: stubOrders{}, Units: stubUnits{}, Views: stubViews{}, Tokens: stubTokens{},
		Metrics: api.NewMetrics(prometheus.NewRegistry()), Log: slog.New(slog.DiscardHandler),
	})
}

// apiRoutes are the API's routes as "METHOD path", from the real handlers
// (at the default settings: /metrics on the public listener too).
func apiRoutes(t *testing.T) map[string]bool {
	t.Helper()
	cfg, err := config.LoadFrom(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := newAPI(cfg)
	routes := map[string]bool{}
	for _, r := range s.HTTPServer().Handler.(*gin.Engine).Routes() {
		routes[r.Method+" "+r.Path] = true
	}
	return routes
}

// apiMetricsServes reports whether the API's own metrics listener
// (SECKILL_API_METRICS_ADDR) answers a path.
func apiMetricsServes(cfg config.Config) func(string) bool {
	return func(path string) bool {
		s := newAPI(cfg)
		ms := s.MetricsServer()
		if ms == nil {
			return false
		}
		rec := httptest.NewRecorder()
		ms.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code == http.StatusOK
	}
}

// workerServes reports whether the worker's metrics listener answers path.
func workerServes(path string) bool {
	rec := httptest.NewRecorder()
	worker.OpsHandler(worker.NewMetrics(nil), nil, nil, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code == http.StatusOK
}

// listenPort is the port of a listen address setting.
func listenPort(t *testing.T, addr string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(n)
}

// containerPort resolves a probe's or service's port (a name or a number).
func containerPort(c corev1.Container, name string, number int32) (int32, bool) {
	for _, p := range c.Ports {
		if (name != "" && p.Name == name) || (name == "" && p.ContainerPort == number) {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

type probe struct {
	kind string
	p    *corev1.Probe
}

func probes(c corev1.Container) []probe {
	return []probe{{"startup", c.StartupProbe}, {"readiness", c.ReadinessProbe}, {"liveness", c.LivenessProbe}}
}

// The probes ask paths the role really serves, on the port it listens on;
// the API's probes use both /healthz and /readyz.
func TestProbesHitRealEndpoints(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	routes := apiRoutes(t)
	eachOverlay(t, func(t *testing.T, o objects) {
		for _, component := range []string{"api", "worker"} {
			r := o.role(t, component)
			addr := r.cfg.API.Addr
			serves := func(path string) bool { return routes["GET "+path] }
			if component == "worker" {
				addr, serves = r.cfg.Worker.MetricsAddr, workerServes
			}
			used := map[string]bool{}
			for _, pr := range probes(r.c) {
				if pr.p == nil || pr.p.HTTPGet == nil {
					t.Errorf("%s: no HTTP %s probe", r.dep.Name, pr.kind)
					continue
				}
				g := pr.p.HTTPGet
				if !serves(g.Path) {
					t.Errorf("%s: %s probe asks %s, which the %s does not serve", r.dep.Name, pr.kind, g.Path, component)
				}
				used[g.Path] = true
				port, ok := containerPort(r.c, g.Port.StrVal, g.Port.IntVal)
				if !ok || port != listenPort(t, addr) {
					t.Errorf("%s: %s probe on port %s (%d), the %s listens on %s", r.dep.Name, pr.kind, g.Port.String(), port, component, addr)
				}
			}
			if component == "api" && (!used["/healthz"] || !used["/readyz"]) {
				t.Errorf("%s: probes use %v, want both /healthz and /readyz", r.dep.Name, used)
			}
		}
	})
}

// The grace period covers each role's ordered shutdown, computed from the
// settings the role runs with.
func TestGraceCoversTeardown(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		for _, component := range []string{"api", "worker"} {
			r := o.role(t, component)
			var preStop time.Duration
			if l := r.c.Lifecycle; l != nil && l.PreStop != nil {
				if l.PreStop.Sleep == nil {
					t.Fatalf("%s: a preStop other than sleep (the image has no shell)", r.dep.Name)
				}
				preStop = time.Duration(l.PreStop.Sleep.Seconds) * time.Second
			}
			var need time.Duration
			if component == "api" {
				// HTTP drain, then the relay's flush (cmd/seckill/api.go).
				need = preStop + r.cfg.API.ShutdownTimeout + r.cfg.API.Relay.FlushTimeout + graceMargin
			} else {
				// The order consumer, then the dead-letter consumer, each
				// waiting for its starts in flight; then /metrics.
				need = preStop + 2*(workerSettle+r.cfg.Worker.StartTimeout) + workerMetricsShutdown + graceMargin
			}
			var grace time.Duration
			if gp := r.dep.Spec.Template.Spec.TerminationGracePeriodSeconds; gp != nil {
				grace = time.Duration(*gp) * time.Second
			}
			if grace < need {
				t.Errorf("%s: terminationGracePeriodSeconds is %v, its teardown needs %v", r.dep.Name, grace, need)
			}
		}
	})
}

// Resource requests come from the measured figures; memory limits sit above
// the soft limit the process sets itself and above the measured peak.
func TestResourcesFromMeasuredFigures(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		for _, component := range []string{"api", "worker"} {
			r := o.role(t, component)
			soft, peak := r.cfg.API.MemoryLimitMB, float64(apiPeakRSS)
			if component == "worker" {
				soft, peak = r.cfg.Worker.MemoryLimitMB, float64(workerPeakRSS)
			}
			req, lim := r.c.Resources.Requests, r.c.Resources.Limits
			if req.Cpu().IsZero() {
				t.Errorf("%s: no CPU request (the HPA and the scheduler need one)", r.dep.Name)
			}
			memReq, memLim := req.Memory().Value(), lim.Memory().Value()
			if float64(memReq) < peak {
				t.Errorf("%s: memory request %s below the measured peak RSS %.0f MB", r.dep.Name, req.Memory(), peak/1e6)
			}
			if float64(memLim) < 1.5*peak || memLim < int64(soft)<<20 {
				t.Errorf("%s: memory limit %s, want >= 1.5 x the measured peak (%.0f MB) and the soft limit %d MiB",
					r.dep.Name, lim.Memory(), peak/1e6, soft)
			}
			if !lim.Cpu().IsZero() {
				t.Errorf("%s: a CPU limit throttles a stampede; leave it out", r.dep.Name)
			}
		}
		for _, j := range o.jobs {
			c := j.Spec.Template.Spec.Containers[0]
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("job %s: no memory request or limit", j.Name)
			}
		}
	})
}

// The API's consumer name comes from the pod's name; every pod runs as the
// image's non-root user on a read-only root.
func TestPodsIdentityAndSecurity(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		r := o.role(t, "api")
		found := false
		for _, e := range r.c.Env {
			if e.Name == "SECKILL_API_INSTANCE" {
				found = e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
			}
		}
		if !found {
			t.Errorf("%s: SECKILL_API_INSTANCE is not the pod's name (downward API metadata.name)", r.dep.Name)
		}
		pods := o.pods()
		for _, j := range o.jobs {
			if !slices.Equal(j.Spec.Template.Spec.Containers[0].Args, []string{"migrate", "up"}) {
				t.Errorf("job %s: args %v, want migrate up", j.Name, j.Spec.Template.Spec.Containers[0].Args)
			}
		}
		for name, p := range pods {
			if p.SecurityContext == nil || p.SecurityContext.RunAsNonRoot == nil || !*p.SecurityContext.RunAsNonRoot {
				t.Errorf("%s: not runAsNonRoot", name)
			}
			for _, c := range p.Containers {
				sc := c.SecurityContext
				if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
					sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s/%s: want a read-only root and no privilege escalation", name, c.Name)
				}
				if c.Image == "" {
					t.Errorf("%s/%s: no image", name, c.Name)
				}
			}
		}
	})
}

func selects(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatal(err)
	}
	return !s.Empty() && s.Matches(labels.Set(podLabels))
}

// Each Deployment has its PDB; the HPA scales the API Deployment, which
// leaves the replica count to it; Services select their pods and name ports
// the containers have.
func TestDisruptionScalingAndServices(t *testing.T) {
	eachOverlay(t, func(t *testing.T, o objects) {
		for _, d := range o.deployments {
			podLabels := d.Spec.Template.Labels
			if !selects(t, d.Spec.Selector, podLabels) {
				t.Errorf("%s: its selector does not select its pods", d.Name)
			}
			n := 0
			for _, p := range o.pdbs {
				if selects(t, p.Spec.Selector, podLabels) {
					n++
					if p.Spec.MaxUnavailable == nil && p.Spec.MinAvailable == nil {
						t.Errorf("pdb %s: neither maxUnavailable nor minAvailable", p.Name)
					}
				}
			}
			if n != 1 {
				t.Errorf("%s: %d PodDisruptionBudgets select it, want 1", d.Name, n)
			}
			if d.Spec.Strategy.RollingUpdate == nil || d.Spec.Strategy.RollingUpdate.MaxUnavailable == nil ||
				d.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue() != 0 {
				t.Errorf("%s: a rolling update should add a pod before it removes one (maxUnavailable 0)", d.Name)
			}
		}
		h := o.hpas[0]
		api := o.deployment("api")
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != api.Name {
			t.Errorf("hpa %s scales %s %s, want the API Deployment %s", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name, api.Name)
		}
		if api.Spec.Replicas != nil {
			t.Errorf("%s: replicas set while the HPA owns the count", api.Name)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas < *h.Spec.MinReplicas {
			t.Errorf("hpa %s: min %v max %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		for _, svc := range o.services {
			var target *appsv1.Deployment
			for _, d := range o.deployments {
				if selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, d.Spec.Template.Labels) {
					target = d
				}
			}
			if target == nil {
				t.Errorf("service %s selects no Deployment's pods", svc.Name)
				continue
			}
			for _, p := range svc.Spec.Ports {
				if _, ok := containerPort(target.Spec.Template.Spec.Containers[0], p.TargetPort.StrVal, p.TargetPort.IntVal); !ok {
					t.Errorf("service %s: target port %s is not a port of %s", svc.Name, p.TargetPort.String(), target.Name)
				}
			}
		}
		if api := o.deployment("api"); api != nil && !hasService(o, api) {
			t.Errorf("%s: no Service", api.Name)
		}
	})
}

func hasService(o objects, d *appsv1.Deployment) bool {
	for _, svc := range o.services {
		if len(svc.Spec.Selector) > 0 && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
			return true
		}
	}
	return false
}

// The ServiceMonitor scrapes /metrics of both roles through their Services.
func TestServiceMonitorScrapesBothRoles(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	routes := apiRoutes(t)
	monitored := 0
	for _, dir := range overlays(t) {
		o := build(t, dir)
		if !o.hasMonitorCR {
			continue
		}
		monitored++
		if len(o.monitors) != 1 || len(o.promRules) != 1 {
			t.Fatalf("%s: %d ServiceMonitors and %d PrometheusRules, want one each", dir, len(o.monitors), len(o.promRules))
		}
		sm := o.monitors[0]
		scraped := map[string]bool{}
		for _, svc := range o.services {
			if !selects(t, &sm.Spec.Selector, svc.Labels) {
				continue
			}
			for _, ep := range sm.Spec.Endpoints {
				for _, p := range svc.Spec.Ports {
					if ep.Port != p.Name {
						continue
					}
					component := svc.Spec.Selector["app.kubernetes.io/component"]
					r := o.role(t, component)
					addr, serves := r.cfg.Worker.MetricsAddr, workerServes
					if component == "api" {
						addr, serves = r.cfg.API.Addr, func(path string) bool { return routes["GET "+path] }
						if r.cfg.API.MetricsAddr != "" {
							addr, serves = r.cfg.API.MetricsAddr, apiMetricsServes(r.cfg)
						}
					}
					if !serves(ep.Path) {
						t.Errorf("%s: endpoint %s%s of service %s is not served", dir, p.Name, ep.Path, svc.Name)
					}
					if port, ok := containerPort(r.c, p.TargetPort.StrVal, p.TargetPort.IntVal); !ok || port != listenPort(t, addr) {
						t.Errorf("%s: service %s port %s reaches container port %d, /metrics is on %s", dir, svc.Name, p.Name, port, addr)
					}
					scraped[component] = true
				}
			}
		}
		if !scraped["api"] || !scraped["worker"] {
			t.Errorf("%s: ServiceMonitor scrapes %v, want api and worker", dir, scraped)
		}
	}
	if monitored == 0 {
		t.Fatal("no overlay includes the monitoring component")
	}
}

// rulesSpec is deploy/prometheus/rules.yml, decoded strictly into the
// PrometheusRule's spec type.
func rulesSpec(t *testing.T) monitoringv1.PrometheusRuleSpec {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &spec); err != nil {
		t.Fatalf("%s does not decode as a PrometheusRule spec: %v", rulesFile, err)
	}
	return spec
}

// The PrometheusRule holds exactly deploy/prometheus/rules.yml (the file
// promtool tests): -update regenerates it.
func TestPrometheusRuleMatchesRulesFile(t *testing.T) {
	spec := rulesSpec(t)
	if *update {
		rule := monitoringv1.PrometheusRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
			ObjectMeta: metav1.ObjectMeta{Name: "seckill", Labels: map[string]string{"app.kubernetes.io/name": "seckill"}},
			Spec:       spec,
		}
		b, err := yaml.Marshal(rule)
		if err != nil {
			t.Fatal(err)
		}
		b = bytes.Replace(b, []byte("  creationTimestamp: null\n"), nil, 1)
		var out bytes.Buffer
		fmt.Fprintf(&out, "# Generated from deploy/prometheus/rules.yml by\n#   go test ./deploy/kubernetes -run %s -update\n# Do not edit: edit rules.yml (and its promtool tests), then regenerate.\n",
			"TestPrometheusRuleMatchesRulesFile")
		out.Write(b)
		if err := os.WriteFile(ruleManifest, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(ruleManifest)
	if err != nil {
		t.Fatal(err)
	}
	var got monitoringv1.PrometheusRule
	if err := yaml.UnmarshalStrict(b, &got); err != nil {
		t.Fatalf("%s: %v", ruleManifest, err)
	}
	if !reflect.DeepEqual(got.Spec, spec) {
		t.Fatalf("%s differs from %s: regenerate it with\n  go test ./deploy/kubernetes -run TestPrometheusRuleMatchesRulesFile -update", ruleManifest, rulesFile)
	}
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("group %s: a rule with both or neither of alert and record: %+v", g.Name, r)
			}
		}
	}
}
