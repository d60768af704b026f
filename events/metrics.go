package events

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Metrics are the publisher's Prometheus series.
type Metrics struct {
	published, failures prometheus.Counter
	oldest, leader      prometheus.Gauge
}

// NewMetrics registers the publisher's series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		published: f.NewCounter(prometheus.CounterOpts{Name: "seckill_order_events_published_total",
			Help: "Order events the broker stored on the order events topic and marked published."}),
		failures: f.NewCounter(prometheus.CounterOpts{Name: "seckill_order_events_publish_failures_total",
			Help: "Rounds of the order events publisher that failed to send or mark (retried)."}),
		oldest: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_order_events_oldest_unpublished_seconds",
			Help: "Age of the oldest order event not yet published, as the active publisher last saw it (0: none, or not the active one)."}),
		leader: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_order_events_publisher_active",
			Help: "1 while this worker holds the order events lease and publishes."}),
	}
}
