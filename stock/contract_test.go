package stock_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/stock"
	"github.com/seckill/seckill/stock/stocktwin"
	"github.com/seckill/seckill/testkit"
)

// The real store keeps the contract its in-memory twin is held to
// (stocktwin's tests): the API's unit tests run on that twin.
func TestStoreKeepsTheContract(t *testing.T) {
	testkit.Integration(t)
	stocktwin.Contract(t, func(t *testing.T) stocktwin.Store {
		rdb, prefix := testkit.Redis(t)
		return losable{stock.New(rdb, prefix), rdb, t}
	})
}

// losable is the real store with its stock key deleted on demand.
type losable struct {
	*stock.Store
	rdb redis.UniversalClient
	t   *testing.T
}

func (l losable) LoseStock(itemID int64) {
	if err := l.rdb.Del(context.Background(), l.ItemKeys(itemID).Stock).Err(); err != nil {
		l.t.Fatal(err)
	}
}
