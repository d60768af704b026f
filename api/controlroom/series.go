package controlroom

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/store"
)

// The series are read at most once per seriesTTL per instance, each at most
// seriesMaxPoints buckets long.
const (
	seriesTTL       = time.Second
	seriesMaxPoints = 600
)

// Series is one sale over time (docs/openapi.yaml): from Start, the orders
// recorded, paid and refunded in each bucket of StepSeconds.
type Series struct {
	ItemID      int64     `json:"item_id"`
	Start       time.Time `json:"start"`
	StepSeconds int64     `json:"step_seconds"`
	Accepted    []int64   `json:"accepted"`
	Paid        []int64   `json:"paid"`
	Refunded    []int64   `json:"refunded"`
}

type seriesBody struct {
	ReadAt time.Time `json:"read_at"`
	Sales  []Series  `json:"sales"`
}

// GET /api/v1/admin/series (admin): the shown sales that have started, over time.
func (rm *Room) adminSeries(c *gin.Context) {
	if body, ok := reuse(rm, c, &rm.series, seriesTTL, rm.readSeries); ok {
		c.JSON(http.StatusOK, body)
	}
}

func (rm *Room) readSeries(ctx context.Context) (seriesBody, error) {
	now := rm.d.Now()
	b := seriesBody{ReadAt: now.UTC(), Sales: []Series{}}
	byID := make(map[int64]*Series)
	var ids []int64
	for _, it := range rm.d.Items.Shown(now) {
		span := int64(now.Sub(it.StartAt) / time.Second)
		if span < 0 {
			continue
		}
		step := max(1, (span+seriesMaxPoints)/seriesMaxPoints) // span+1 seconds in at most seriesMaxPoints buckets
		n := span/step + 1
		b.Sales = append(b.Sales, Series{ItemID: it.ID, Start: it.StartAt.UTC(), StepSeconds: step,
			Accepted: make([]int64, n), Paid: make([]int64, n), Refunded: make([]int64, n)})
		ids = append(ids, it.ID)
	}
	for i := range b.Sales {
		byID[b.Sales[i].ItemID] = &b.Sales[i]
	}
	secs, err := rm.d.Orders.CountBySecond(ctx, ids)
	if err != nil {
		return seriesBody{}, err
	}
	for _, s := range secs {
		se := byID[s.ItemID]
		if se == nil {
			continue
		}
		var kind []int64
		switch s.Kind {
		case "accepted":
			kind = se.Accepted
		case "paid":
			kind = se.Paid
		case "refunded":
			kind = se.Refunded
		}
		if i := s.Second / se.StepSeconds; i < int64(len(kind)) {
			kind[i] += s.N
		}
	}
	return b, nil
}

var _ OrderCounts = (*store.Store)(nil)
