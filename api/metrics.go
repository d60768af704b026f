package api

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the API's Prometheus series, on a private registry that the
// jobs and the relay register theirs on too.
type Metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	rejections *prometheus.CounterVec
	// Set by the door (payment) and the reservation batches (stock).
	WakesSkipped     prometheus.Counter
	ReplicaWaitShort prometheus.Counter

	routes     sync.Map // route template -> *routeSeries
	rejectedBy sync.Map // error code -> prometheus.Counter
}

// NewMetrics registers the series on reg.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Metrics{
		reg:      reg,
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		rejections: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_rejections_total", Help: "Error answers by error code."}, []string{"reason"}),
		ReplicaWaitShort: counter("seckill_redis_replica_wait_short_total",
			"Reservation batches answered before enough Redis replicas acknowledged them (SECKILL_REDIS_WAIT_REPLICAS)."),
		WakesSkipped: counter("seckill_saga_wakes_skipped_total",
			"Saga wakes after a pay or cancel at the door that were not sent; the saga reads the order row at its deadline."),
	}
}

// Registry is where the series are.
func (m *Metrics) Registry() prometheus.Registerer { return m.reg }

func (m *Metrics) rejected(code string) {
	if c, ok := m.rejectedBy.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.rejections.WithLabelValues(code)
	m.rejectedBy.Store(code, c)
	c.Inc()
}

// routeSeries are one route's series, resolved once: label lookups cost more
// than the observation.
type routeSeries struct {
	latency prometheus.Observer
	codes   [600]atomic.Pointer[prometheus.Counter]
}

func (m *Metrics) route(route string) *routeSeries {
	if r, ok := m.routes.Load(route); ok {
		return r.(*routeSeries)
	}
	r, _ := m.routes.LoadOrStore(route, &routeSeries{latency: m.latency.WithLabelValues(route)})
	return r.(*routeSeries)
}

func (m *Metrics) count(r *routeSeries, route string, code int) {
	if code < 100 || code >= len(r.codes) {
		m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		return
	}
	p := r.codes[code].Load()
	if p == nil {
		c := m.requests.WithLabelValues(route, strconv.Itoa(code))
		p = &c
		r.codes[code].Store(p)
	}
	(*p).Inc()
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// middleware observes every request by route template and status.
func (m *Metrics) middleware() gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		r := m.route(route)
		m.count(r, route, c.Writer.Status())
		r.latency.Observe(time.Since(start).Seconds())
	}
}
