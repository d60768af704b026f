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

// Metrics are the API's Prometheus series (and the Go runtime's), on a
// private registry; also relay.Metrics for this instance's outbox relay.
type Metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	reserved    prometheus.Counter
	rejections  *prometheus.CounterVec
	backlog     *prometheus.GaugeVec
	published   prometheus.Counter
	pubFailures prometheus.Counter
	pubDegraded *prometheus.CounterVec
	// Set by the door (payment) and the reservation batches (stock).
	WakesSkipped     prometheus.Counter
	ReplicaWaitShort prometheus.Counter
	confirms         *prometheus.CounterVec
	firstPay         *prometheus.HistogramVec // the control room's 202 -> first accepted pay

	routes     sync.Map // route template -> *routeSeries
	rejectedBy sync.Map // error code -> prometheus.Counter
}

// NewMetrics registers the series on reg.
func NewMetrics(reg *prometheus.Registry) *Metrics {
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	counters := func(name, help, label string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{label})
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Metrics{
		reg:      reg,
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_http_requests_total", Help: "HTTP requests by route and status code."}, []string{"route", "code"}),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"route"}),
		reserved:   counter("seckill_reservations_total", "Units reserved (202 answers)."),
		rejections: counters("seckill_rejections_total", "Error answers by error code.", "reason"),
		backlog: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_outbox_backlog", Help: "Reservations in an item's outbox not yet published to RocketMQ.",
		}, []string{"item_id"}),
		published:   counter("seckill_outbox_published_total", "Outbox entries published to RocketMQ and acknowledged."),
		pubFailures: counter("seckill_outbox_publish_failures_total", "Failed sends of outbox entries (retried)."),
		pubDegraded: counters("seckill_outbox_publish_degraded_total",
			"Outbox sends the broker stored without its full durability (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE): delivered, not resent.", "status"),
		ReplicaWaitShort: counter("seckill_redis_replica_wait_short_total",
			"Reservation batches answered before enough Redis replicas acknowledged them (SECKILL_REDIS_WAIT_REPLICAS)."),
		confirms: counters("seckill_reservation_confirms_total",
			"Reservations that failed with their outcome unknown, by what the buyer's mark then said (reserved: 202; not_reserved: 503; unknown: Redis did not answer within SECKILL_API_CONFIRM_TIMEOUT, 503).", "outcome"),
		firstPay: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "seckill_order_first_pay_seconds",
			Help: "Time from an order's 202 (its id's timestamp) to the first pay of it the door accepted, by item: what a buyer who pays at once waits for. " +
				"Every API instance observes every order (from the order views all instances receive): read one instance's series, not their sum.",
			// 5 ms to 10 min (a payment window), about 22 % apart.
			Buckets: prometheus.ExponentialBucketsRange(0.005, 600, 60),
		}, []string{"item_id"}),
		WakesSkipped: counter("seckill_saga_wakes_skipped_total",
			"Saga wakes after a pay or cancel at the door that were not sent; the saga reads the order row at its deadline."),
	}
}

// Published counts relayed messages (relay.Metrics).
func (m *Metrics) Published(n int) { m.published.Add(float64(n)) }

// PublishFailed counts a failed send (relay.Metrics).
func (m *Metrics) PublishFailed() { m.pubFailures.Inc() }

// PublishDegraded counts a send stored with a degraded status (queue.Producer.OnDegraded).
func (m *Metrics) PublishDegraded(status string) { m.pubDegraded.WithLabelValues(status).Inc() }

// Backlog records an item's outbox length (relay.Metrics).
func (m *Metrics) Backlog(itemID int64, n int64) {
	m.backlog.WithLabelValues(strconv.FormatInt(itemID, 10)).Set(float64(n))
}

func (m *Metrics) rejected(code string) {
	if c, ok := m.rejectedBy.Load(code); ok {
		c.(prometheus.Counter).Inc()
		return
	}
	c := m.rejections.WithLabelValues(code)
	m.rejectedBy.Store(code, c)
	c.Inc()
}

// routeSeries are one route's series, resolved once: at stampede rates the
// vectors' label lookups cost more than the observation.
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
