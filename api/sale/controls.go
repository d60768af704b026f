package sale

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/seckill/seckill/api/apierr"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/store"
)

// controlTimeout bounds a sale control's writes (an end, an add and its
// settling).
const controlTimeout = 10 * time.Second

// control is an admin's sale control on the :id item with the request's
// Idempotency-Key ("" when none). Its writes run on a context of their own:
// a client that gives up during the COMMIT must not make a committed write
// unknown.
func (s *Sale) control(fn func(ctx context.Context, c *gin.Context, id int64, key string) error) func(*gin.Context) error {
	return func(c *gin.Context) error {
		id, err := s.itemID(c, auth.RoleAdmin)
		if err != nil {
			return err
		}
		key := c.GetHeader("Idempotency-Key")
		if len(key) > 200 {
			return apierr.BadRequest("Idempotency-Key: at most 200 characters")
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), controlTimeout)
		defer cancel()
		return fn(ctx, c, id, key)
	}
}

// POST /api/v1/items/:id/end (admin): the sale ends now; orders accepted go
// on. A repeated end is 409 SALE_ENDED, or 200 with the Idempotency-Key of
// the end that did it (item.end_key). Either way the end is announced again,
// repairing a lost announcement.
func (s *Sale) endSale(ctx context.Context, c *gin.Context, id int64, key string) error {
	it, err := s.d.Controls.EndSale(ctx, id, key)
	if errors.Is(err, store.ErrSaleEnded) && key != "" && it.EndKey != nil && *it.EndKey == key {
		err = nil // the retry of the request that ended it
	}
	if err != nil && !errors.Is(err, store.ErrSaleEnded) {
		return err
	}
	ci, aerr := s.changed(ctx, it, false)
	if aerr != nil && err == nil {
		// Other instances may sell until their item sync: a retry re-announces.
		err = apierr.ErrUnavailable.With(fmt.Sprintf("the sale of item %d has ended but not every API instance could be told yet; retry with the same Idempotency-Key", id))
	}
	if err != nil {
		return err
	}
	s.log.Info("sale ended by an admin", "item_id", id, "end_at", it.EndAt)
	return s.writeItem(c, http.StatusOK, ci)
}

// changed caches an item whose sale data changed and tells every instance,
// which reloads it (or, if the announcement failed, at its refresh or sync).
func (s *Sale) changed(ctx context.Context, it store.Item, unitsBack bool) (*Entry, error) {
	ci := s.items.written(it)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	rev, err := s.d.Announcer.AnnounceItem(ctx, it.ID, unitsBack)
	if err != nil {
		s.log.Warn("item change not announced", "item_id", it.ID, "err", err)
		return ci, err
	}
	s.items.announced(ci, rev)
	return ci, nil
}

// POST /api/v1/items/:id/stock (admin), body {"add": N}: one transaction
// raises the rows and records the add, adds the units in Redis (once per add
// id) with the rows still locked, then commits. A retry with the key of an
// applied add answers its result (409 when its N differs). If the Redis add
// or the commit fails, settleAdd learns whether the add committed before it
// undoes anything.
func (s *Sale) addStock(ctx context.Context, c *gin.Context, id int64, key string) error {
	const maxAdd = 1_000_000
	shape := fmt.Sprintf(`body must be {"add": N} with N an integer between 1 and %d`, maxAdd)
	var req struct{ Add *int64 }
	if err := apierr.ReadJSON(c, &req, shape); err != nil {
		return err
	}
	if req.Add == nil {
		return apierr.BadRequest(shape)
	}
	n := *req.Add
	if n < 1 || n > maxAdd {
		return apierr.BadRequest(fmt.Sprintf("add: must be between 1 and %d", maxAdd))
	}
	// A fresh id per attempt, never the key: a retry overtaking an attempt
	// still settling must not share (and have undone) its Redis add.
	addID := order.NewID()
	tried := false
	it, replayed, err := s.d.Controls.AddStock(ctx, id, n, key, addID, func(ctx context.Context, _ store.Item) error {
		tried = true
		_, err := s.d.Loader.AddUnits(ctx, id, addID, n)
		return err
	})
	if err != nil && tried {
		if committed, serr := s.settleAdd(ctx, id, addID); serr != nil {
			s.log.Error("stock add's outcome unknown and its Redis units not taken back; run seckill reconcile --repair",
				"item_id", id, "add_id", addID, "err", err, "settle_err", serr)
		} else if committed {
			s.log.Warn("stock add committed though its commit answered an error", "item_id", id, "add_id", addID, "err", err)
			it, err = s.d.Catalog.GetItem(ctx, id)
		}
	}
	if err != nil {
		return err
	}
	if replayed {
		// it carries the first add's stock_total.
		c.Header("Idempotent-Replayed", "true")
		s.log.Info("units add retried; answered its first result", "item_id", id, "add", n, "stock_total", it.StockTotal)
		ci, err := s.items.Get(ctx, id)
		if err != nil {
			return err
		}
		c.JSON(http.StatusOK, itemView(it, s.lefts(ctx, ci)[0], s.d.Now()))
		return nil
	}
	ci, _ := s.changed(ctx, it, true)
	s.log.Info("units added by an admin", "item_id", id, "add", n, "stock_total", it.StockTotal)
	return s.writeItem(c, http.StatusOK, ci)
}

// settleAdd decides an add whose transaction failed after its Redis add:
// with the stock row locked (the transaction has ended, no recount runs) it
// looks the add up, and only if it did not commit takes its units back.
// Retried for a while; else the reconciler's recount repairs Redis.
func (s *Sale) settleAdd(ctx context.Context, id int64, addID string) (committed bool, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), controlTimeout)
	defer cancel()
	err = apierr.Retry(ctx, func(ctx context.Context) error {
		_, err := s.d.Rows.FenceStock(ctx, id, store.Stock{Version: -1}, nil, func(store.Stock, []string) error {
			applied, err := s.d.Controls.AddApplied(ctx, addID)
			if err != nil || applied {
				committed = applied
				return err
			}
			_, err = s.d.Loader.UndoAdd(ctx, id, addID)
			return err
		})
		return err
	})
	return committed, err
}
