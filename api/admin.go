package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// POST /api/v1/items/:id/end (admin): the sale ends now (end_at becomes the
// database's NOW(3)); orders already accepted go on. A repeated end is 409
// SALE_ENDED, unless it carries the Idempotency-Key of the request that ended
// the sale (a client retrying a lost answer): 200 again. Either way the end is
// announced again, so a repeat also repairs a lost announcement.
func (s *Server) endSale(c *gin.Context) error {
	id, err := s.itemID(c, auth.RoleAdmin)
	if err != nil {
		return err
	}
	key := c.GetHeader("Idempotency-Key")
	if len(key) > 200 {
		return badRequest("Idempotency-Key: at most 200 characters")
	}
	ctx := c.Request.Context()
	it, err := s.deps.Items.EndSale(ctx, id)
	if errors.Is(err, store.ErrSaleEnded) && key != "" {
		if k, kerr := s.units.EndKey(ctx, id); kerr == nil && k == key {
			err = nil // the retry of the request that ended it
		}
	}
	if err != nil && !errors.Is(err, store.ErrSaleEnded) {
		return err
	}
	ci, aerr := s.changed(ctx, it, false, key)
	if aerr != nil && err == nil {
		// Other instances may go on selling until their periodic item
		// sync: say so; a retry re-announces.
		err = ErrUnavailable.with(fmt.Sprintf("the sale of item %d has ended but not every API instance could be told yet; retry with the same Idempotency-Key", id))
	}
	if err != nil {
		return err
	}
	s.log.Info("sale ended by an admin", "item_id", id, "end_at", it.EndAt)
	return s.writeItem(c, http.StatusOK, ci)
}

// changed caches an item whose sale data changed and tells every instance
// (its revision in Redis moves, its id goes out on the item events channel):
// each reloads it at once, or at its periodic refresh or sync if the
// announcement failed.
func (s *Server) changed(ctx context.Context, it store.Item, unitsBack bool, endKey string) (*cachedItem, error) {
	ci := s.items.replace(it, -1)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	err := s.units.AnnounceItem(ctx, it.ID, unitsBack, endKey)
	if err != nil {
		s.log.Warn("item change not announced", "item_id", it.ID, "err", err)
	}
	return ci, err
}

// POST /api/v1/items/:id/stock (admin), body {"add": N}: one transaction
// locks the item row, raises stock_total and the stock row, then, with both
// rows still locked, adds the units in Redis (once per add id), and only then
// commits. If the Redis add or the commit fails, it is undone by its id.
func (s *Server) addStock(c *gin.Context) error {
	id, err := s.itemID(c, auth.RoleAdmin)
	if err != nil {
		return err
	}
	const maxAdd = 1_000_000
	shape := fmt.Sprintf(`body must be {"add": N} with N an integer between 1 and %d`, maxAdd)
	var req struct{ Add *int64 }
	if err := readJSON(c, &req, shape); err != nil {
		return err
	}
	if req.Add == nil {
		return badRequest(shape)
	}
	n := *req.Add
	if n < 1 || n > maxAdd {
		return badRequest(fmt.Sprintf("add: must be between 1 and %d", maxAdd))
	}
	ctx := c.Request.Context()
	addID := order.NewID()
	tried := false
	it, err := s.deps.Items.AddStock(ctx, id, n, func(ctx context.Context, _ store.Item) error {
		tried = true
		_, err := s.units.AddUnits(ctx, id, addID, n)
		return err
	})
	if err != nil {
		if tried {
			s.undoAdd(ctx, id, addID)
		}
		return err
	}
	ci, _ := s.changed(ctx, it, true, "")
	s.log.Info("units added by an admin", "item_id", id, "add", n, "stock_total", it.StockTotal)
	return s.writeItem(c, http.StatusOK, ci)
}

// undoAdd takes back a Redis add whose transaction did not commit, retrying
// for a while (the add id makes it safe to repeat). If Redis stays out of
// reach, the reconciler's recount from the stock row takes the units away.
func (s *Server) undoAdd(ctx context.Context, id int64, addID string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := retry(ctx, func(ctx context.Context) error {
		_, err := s.units.UndoAdd(ctx, id, addID)
		return err
	})
	if err != nil {
		s.log.Error("stock add not committed and its Redis units not taken back; run seckill reconcile --repair",
			"item_id", id, "add_id", addID, "err", err)
	}
}

// readJSON decodes the request body into dst; shape says what the body must
// be when it is not such JSON.
func readJSON(c *gin.Context, dst any, shape string) error {
	body, err := io.ReadAll(c.Request.Body)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case err != nil:
		return badRequest("could not read the body")
	case json.Unmarshal(body, dst) != nil:
		return badRequest(shape)
	}
	return nil
}
