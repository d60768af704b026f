package relay

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Counters are the relay's Prometheus series (its Metrics).
type Counters struct {
	backlog     *prometheus.GaugeVec
	published   prometheus.Counter
	pubFailures prometheus.Counter
	pubDegraded *prometheus.CounterVec
}

// NewMetrics registers the relay's series on reg.
func NewMetrics(reg prometheus.Registerer) *Counters {
	f := promauto.With(reg)
	return &Counters{
		backlog: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "seckill_outbox_backlog", Help: "Reservations in an item's outbox not yet published to RocketMQ.",
		}, []string{"item_id"}),
		published: f.NewCounter(prometheus.CounterOpts{Name: "seckill_outbox_published_total",
			Help: "Outbox entries published to RocketMQ and acknowledged."}),
		pubFailures: f.NewCounter(prometheus.CounterOpts{Name: "seckill_outbox_publish_failures_total",
			Help: "Failed sends of outbox entries (retried)."}),
		pubDegraded: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_outbox_publish_degraded_total",
			Help: "Outbox sends the broker stored without its full durability (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE): delivered, not resent."},
			[]string{"status"}),
	}
}

func (m *Counters) Published(n int) { m.published.Add(float64(n)) }

func (m *Counters) PublishFailed() { m.pubFailures.Inc() }

// PublishDegraded counts a send stored with a degraded status.
func (m *Counters) PublishDegraded(status string) { m.pubDegraded.WithLabelValues(status).Inc() }

func (m *Counters) Backlog(itemID int64, n int64) {
	m.backlog.WithLabelValues(strconv.FormatInt(itemID, 10)).Set(float64(n))
}
