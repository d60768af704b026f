package stock_test

import (
	"testing"

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
		return stock.New(rdb, prefix)
	})
}
