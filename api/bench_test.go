package api_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
)

// BenchmarkPurchase measures POST /api/v1/seckill/:itemId over a real
// listener with real Redis and MySQL: every request is a distinct buyer
// (a 202 while stock lasts, then the sold-out path). Run:
// go test -run XXX -bench Purchase -benchtime 20000x ./api/
func BenchmarkPurchase(b *testing.B) {
	h := newHarness(b, func(c *config.API, _ *api.Deps) {
		c.BuyerRPS, c.BuyerBurst = 1e6, 1e6
	})
	for _, units := range []int64{1_000_000, 1} {
		b.Run(fmt.Sprintf("stock=%d", units), func(b *testing.B) {
			item := h.activeItem(units)
			path := fmt.Sprintf("%s/api/v1/seckill/%d", h.ts.URL, item)
			var next atomic.Int64
			tokens := make([]string, 50_000)
			for i := range tokens {
				tokens[i] = h.buyer(int64(i + 1))
			}
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
			b.SetParallelism(32)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					req, _ := http.NewRequest("POST", path, nil)
					req.Header.Set("Authorization", "Bearer "+tokens[next.Add(1)%int64(len(tokens))])
					res, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_ = res.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
