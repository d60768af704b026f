package stock

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
)

//go:embed reserve_batch.lua
var reserveBatchLua string

var reserveBatchScript = redis.NewScript(reserveBatchLua)

// maxBatch bounds one batch script call (Redis runs a script alone: a long
// one delays every other command).
const maxBatch = 64

// batcher gathers the concurrent reservations of one item into one script
// call: a purchase that finds no call in flight runs one with itself and
// whatever arrived meanwhile; the others wait for the batch that carries
// them. Nothing waits for a timer: a lone purchase is a batch of one.
type batcher struct {
	mu      sync.Mutex
	pending map[int64][]*batchReq
	running map[int64]bool
}

type batchReq struct {
	ctx  context.Context
	msg  order.Message
	view []byte
	left int64
	err  error
	done chan struct{}
}

// UseBatching makes ReserveQueued reserve through one script call per batch
// of concurrent purchases of an item instead of one call each.
func (s *Store) UseBatching() {
	s.batch = &batcher{pending: map[int64][]*batchReq{}, running: map[int64]bool{}}
}

// reserveBatched queues the reservation and returns its outcome.
func (s *Store) reserveBatched(ctx context.Context, r order.Message, v order.View) (int64, error) {
	view, err := json.Marshal(v)
	if err != nil {
		return 0, fmt.Errorf("encode order view: %w", err)
	}
	req := &batchReq{ctx: ctx, msg: r, view: view, done: make(chan struct{})}
	b := s.batch
	b.mu.Lock()
	b.pending[r.ItemID] = append(b.pending[r.ItemID], req)
	lead := !b.running[r.ItemID]
	if lead {
		b.running[r.ItemID] = true
	}
	b.mu.Unlock()
	if lead {
		s.runBatches(r.ItemID, true)
	}
	select {
	case <-req.done:
		return req.left, req.err
	case <-ctx.Done():
		// The batch may still reserve it: the caller must find out
		// (BuyerOrder), as after any error of Reserve.
		return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, ctx.Err())
	}
}

// runBatches runs batches of the item until none is pending. The first
// batch runs on the caller's goroutine (it is in it); later ones on a new
// goroutine, so the caller answers its buyer at once.
func (s *Store) runBatches(itemID int64, first bool) {
	b := s.batch
	for {
		b.mu.Lock()
		reqs := b.pending[itemID]
		if len(reqs) == 0 {
			delete(b.pending, itemID)
			b.running[itemID] = false
			delete(b.running, itemID)
			b.mu.Unlock()
			return
		}
		n := min(len(reqs), maxBatch)
		batch := reqs[:n:n]
		if n == len(reqs) {
			b.pending[itemID] = nil
		} else {
			b.pending[itemID] = reqs[n:]
		}
		b.mu.Unlock()
		s.execBatch(itemID, batch)
		if first {
			go s.runBatches(itemID, false)
			return
		}
	}
}

// execBatch reserves a batch in one script call and stores the QUEUED view
// of each taken unit in the same round trip (pipelined SET NX after the
// script; a view of a refused one is deleted again).
func (s *Store) execBatch(itemID int64, batch []*batchReq) {
	k := s.ItemKeys(itemID)
	keys := []string{k.Stock, k.Buyers, k.Orders, k.Outbox}
	args := make([]any, 0, 3*len(batch))
	for _, r := range batch {
		args = append(args, r.msg.UserID, r.msg.OrderID, r.msg.Encode())
	}
	// Not bound to any one buyer's request: the batch is everybody's.
	ctx := context.WithoutCancel(batch[0].ctx)
	res := reserveBatchScript.Run(ctx, s.rdb, keys, args...)
	vals, err := res.Slice()
	if err == nil && len(vals) != 2*len(batch) {
		err = fmt.Errorf("reserve batch: %d values for %d buyers", len(vals), len(batch))
	}
	if err != nil {
		for _, r := range batch {
			r.err = fmt.Errorf("reserve item %d for buyer %d: %w", itemID, r.msg.UserID, err)
			close(r.done)
		}
		return
	}
	var taken []*batchReq
	for i, r := range batch {
		code, _ := vals[2*i].(int64)
		switch code {
		case 0:
			r.left, _ = vals[2*i+1].(int64)
			taken = append(taken, r)
		case 1:
			r.err = ErrSoldOut
		case 2:
			id, _ := vals[2*i+1].(string)
			r.err = &AlreadyReservedError{OrderID: id}
		case 3:
			r.err = fmt.Errorf("item %d: %w", itemID, ErrNotLoaded)
		default:
			r.err = fmt.Errorf("reserve: unexpected code %d", code)
		}
	}
	if len(taken) > 0 {
		// A failed SET NX only leaves GET order blind until the saga
		// publishes the next status.
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range taken {
				p.SetNX(ctx, orderstatus.Key(s.prefix, r.msg.OrderID), r.view, orderstatus.TTL)
			}
			return nil
		})
	}
	for _, r := range batch {
		close(r.done)
	}
}
