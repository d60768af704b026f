package worker

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the worker's Prometheus metrics, on a registry of their own.
type Metrics struct {
	reg                                            *prometheus.Registry
	SagaStarts, StartErrors, Invalid, DeadLetterEr prometheus.Counter
	PhantomUnits, Refunds, RefundFailures          prometheus.Counter
	DeadLetters, Repairs, Forged                   *prometheus.CounterVec
	Drift                                          *prometheus.GaugeVec
	Captured, Refunded, RefundsPending, Stuck      *prometheus.GaugeVec // the books of the last reconcile run
	Payable                                        prometheus.Histogram
	RefundDrives                                   prometheus.Counter
	RefundsOwed, RefundsOverdue, RefundOldest      prometheus.Gauge // every refund row not confirmed, whatever its sale's age
}

// NewMetrics creates and registers the worker's metrics (with a gate, whether it holds).
func NewMetrics(gate *Gate) *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := promauto.With(reg)
	counter := func(name, help string) prometheus.Counter {
		return f.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	if gate != nil {
		f.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "seckill_worker_consumer_held",
			Help: "1 while the order consumer is held (POST /admin/consumer/hold) and messages wait in the worker and the broker; 0 after its release.",
		}, func() float64 {
			if gate.Held() {
				return 1
			}
			return 0
		})
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return f.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help + " (the books of the last reconcile run, items live or ended within SECKILL_RECONCILE_SINCE)."}, labels)
	}
	return &Metrics{
		Captured: gauge("seckill_payment_captured_minor", "Money the provider took for the item's orders, in minor units of currency", "item_id", "currency"),
		Refunded: gauge("seckill_payment_refunded_minor", "Refunds the provider confirmed, in minor units of currency", "item_id", "currency"),
		RefundsPending: gauge("seckill_payment_refunds_pending_minor",
			"Money owed back (a payment of an order that did not keep it) and not refunded yet, in minor units of currency", "item_id", "currency"),
		Stuck:       gauge("seckill_payment_refunds_stuck", "Payments owed back without a confirmed refund past SECKILL_RECONCILE_GRACE", "item_id"),
		reg:         reg,
		SagaStarts:  counter("seckill_worker_saga_starts_total", "Order messages turned into an OrderSaga (started now or found already started)."),
		StartErrors: counter("seckill_worker_saga_start_errors_total", "Saga starts that failed; the message is redelivered later."),
		Invalid:     counter("seckill_worker_invalid_messages_total", "Order messages that could not be decoded and were dropped (logged with their body)."),
		DeadLetters: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_worker_dead_letter_orders_total",
			Help: "Orders taken from the dead-letter topic, by outcome: started (the saga was started, or already existed), invalid (undecodable, dropped) or forged (not signed by the API, dropped)."},
			[]string{"outcome"}),
		Forged: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_worker_forged_messages_total",
			Help: "Messages on the orders or dead-letter topic (source) whose signature is missing or matches no order signing key: dropped (logged with their body and sender), no saga started."},
			[]string{"source"}),
		DeadLetterEr: counter("seckill_worker_dead_letter_errors_total", "Dead-letter handling attempts that failed and will be retried."),
		PhantomUnits: counter("seckill_worker_phantom_units_retired_total",
			"Redis reservations retired without giving the unit back: the stock row (the ground truth) never had that unit."),
		Refunds: counter("seckill_worker_refunds_total",
			"Orders paid while QUEUED that the saga could not complete (the stock row had no unit: a phantom unit) and that ended REFUNDED."),
		RefundFailures: counter("seckill_payment_refund_failures_total",
			"Attempts of the saga's RefundPayment step that failed (the provider refused, was unreachable or has not confirmed); each is retried until the provider confirms."),
		Drift: f.NewGaugeVec(prometheus.GaugeOpts{Name: "seckill_reconcile_drift",
			Help: "Drift between Redis, MySQL and Temporal left unrepaired by the last reconcile run, by kind."}, []string{"kind"}),
		Repairs: f.NewCounterVec(prometheus.CounterOpts{Name: "seckill_reconcile_repairs_total",
			Help: "Drift repaired by reconcile runs, by kind."}, []string{"kind"}),
		RefundDrives: counter("seckill_refund_drives_total",
			"PaymentRefund workflows the refund driver started for owed refunds no saga or workflow was working on."),
		RefundsOwed: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_refunds_owed",
			Help: "Refund rows the provider has not confirmed (pending or failed), whatever the age of their sale."}),
		RefundsOverdue: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_refunds_owed_overdue",
			Help: "Refund rows owed for longer than SECKILL_REFUNDS_GRACE and not confirmed: money kept without a unit (alert SeckillRefundOwedOverdue)."}),
		RefundOldest: f.NewGauge(prometheus.GaugeOpts{Name: "seckill_refund_owed_oldest_seconds",
			Help: "Age of the oldest refund row not confirmed (0: none)."}),
		Payable: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "seckill_order_payable_seconds",
			Help:    "Time from an order's 202 (its id's timestamp) to its stock-row unit taken (PENDING_PAYMENT, or PAID when paid while QUEUED). With early payment an order is payable from its 202: this is the order tier's catch-up.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600},
		}),
	}
}

func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registerer is the registry, for the series of the parts the worker runs (events.NewMetrics).
func (m *Metrics) Registerer() prometheus.Registerer { return m.reg }
