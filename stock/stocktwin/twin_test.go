package stocktwin_test

import (
	"testing"

	"github.com/seckill/seckill/stock/stocktwin"
)

// The twin follows stock's rules (stock's contract_test.go holds the real
// store to the same ones).
func TestTwinKeepsTheContract(t *testing.T) {
	stocktwin.Contract(t, func(*testing.T) stocktwin.Store { return stocktwin.New() })
}
