package stock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seckill/seckill/internal/keyspace"
	"github.com/seckill/seckill/order"
	"github.com/seckill/seckill/orderstatus"
)

// maxBatch bounds one script call (Redis runs nothing else meanwhile).
const maxBatch = 64

// batcher gathers the concurrent reservations of an item into one script
// call, run by a purchase that finds none in flight.
type batcher struct {
	mu      sync.Mutex
	pending map[int64][]*batchReq
	running map[int64]bool
}

type batchReq struct {
	ctx  context.Context
	msg  order.Message
	body []byte // msg encoded
	view []byte
	left int64
	err  error
	done chan struct{}
}

type replicaWait struct {
	replicas int
	timeout  time.Duration
	short    func() // called when fewer replicas acknowledged in time
}

// UseReplicaWait makes a batch wait until replicas replicas hold it (WAIT, at
// most timeout) before its buyers are answered; short, when not nil, is
// called for each batch that timed out with fewer (the reservations stand).
func (s *Store) UseReplicaWait(replicas int, timeout time.Duration, short func()) {
	s.wait = replicaWait{replicas: replicas, timeout: timeout, short: short}
}

// Reserve takes a unit for the buyer in the item's next batch (and appends it
// to the outbox), storing its QUEUED view, and returns the units left.
// Refusals: ErrSoldOut, ErrNotLoaded, *AlreadyReservedError; after any other
// error the caller must find out (BuyerOrder).
func (s *Store) Reserve(ctx context.Context, r order.Message) (int64, error) {
	body, view := queuedJSON(r)
	req := &batchReq{ctx: ctx, msg: r, body: body, view: view, done: make(chan struct{})}
	b := &s.batch
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
		// The batch may still reserve it.
		return 0, fmt.Errorf("reserve item %d for buyer %d: %w", r.ItemID, r.UserID, ctx.Err())
	}
}

// runBatches runs the item's pending batches, the first on the caller's goroutine.
func (s *Store) runBatches(itemID int64, first bool) {
	b := &s.batch
	for {
		b.mu.Lock()
		reqs := b.pending[itemID]
		if len(reqs) == 0 {
			delete(b.pending, itemID)
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

// execBatch reserves a batch, then stores the QUEUED views, then answers.
func (s *Store) execBatch(itemID int64, batch []*batchReq) {
	k := s.ItemKeys(itemID)
	keys := []string{k.Stock, k.Buyers, k.Orders, k.Outbox}
	args := make([]any, 0, 3*len(batch))
	for _, r := range batch {
		args = append(args, r.msg.UserID, r.msg.OrderID, r.body)
	}
	ctx := context.WithoutCancel(batch[0].ctx)
	vals, err := s.runScript(ctx, k.Stock, keys, args)
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
			if id == r.msg.OrderID {
				// Its own mark: a resent script whose reply was lost. How
				// many are left is not known (1 keeps the sold-out flag down).
				r.left = 1
				taken = append(taken, r)
				continue
			}
			r.err = &AlreadyReservedError{OrderID: id}
		case 3:
			r.err = fmt.Errorf("item %d: %w", itemID, ErrNotLoaded)
		default:
			r.err = fmt.Errorf("reserve: unexpected code %d", code)
		}
	}
	if len(taken) > 0 {
		// A failed SET NX only leaves GET order blind until the next status.
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, r := range taken {
				p.SetNX(ctx, keyspace.Order(s.prefix, r.msg.OrderID), r.view, orderstatus.TTL)
			}
			return nil
		})
	}
	for _, r := range batch {
		close(r.done)
	}
}

// queuedJSON is m's encoding and its QUEUED view's, byte for byte json.Marshal's
// (a test holds it) but cheaper; an id that might need escaping goes through it.
func queuedJSON(m order.Message) (body, view []byte) {
	if strings.Trim(m.OrderID, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
		view, _ = json.Marshal(m.QueuedView()) // plain fields: cannot fail
		return m.Encode(), view
	}
	head := append([]byte(`{"order_id":"`), m.OrderID...)
	head = strconv.AppendInt(append(head, `","item_id":`...), m.ItemID, 10)
	head = strconv.AppendInt(append(head, `,"user_id":`...), m.UserID, 10)
	body = appendTime(append(slices.Clip(head), `,"reserved_at":`...), m.ReservedAt)
	view = append(slices.Clip(head), `,"status":"`+order.StatusQueued+`","reason":""`...)
	if m.PayBy != nil {
		body = appendTime(append(body, `,"pay_by":`...), *m.PayBy)
		view = appendTime(append(view, `,"pay_by":`...), *m.PayBy)
	}
	view = appendTime(append(view, `,"created_at":`...), m.ReservedAt)
	view = appendTime(append(view, `,"updated_at":`...), m.ReservedAt)
	return append(body, '}'), append(view, '}')
}

func appendTime(b []byte, t time.Time) []byte {
	return append(t.AppendFormat(append(b, '"'), time.RFC3339Nano), '"')
}

// runScript runs the reserve script (with UseReplicaWait: and WAIT, on the master).
func (s *Store) runScript(ctx context.Context, key string, keys []string, args []any) ([]any, error) {
	if s.wait.replicas <= 0 {
		vals, err := reserveScript.Run(ctx, s.rdb, keys, args...).Slice()
		s.reloadOnMoved(ctx, err)
		return vals, err
	}
	node, err := s.masterFor(ctx, key)
	if err != nil {
		s.reloadOnMoved(ctx, err)
		return nil, err
	}
	run := func(eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd) (*redis.Cmd, *redis.IntCmd, error) {
		var res *redis.Cmd
		var acks *redis.IntCmd
		_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
			res = eval(ctx, p, keys, args...)
			acks = redis.NewIntCmd(ctx, "wait", s.wait.replicas, s.wait.timeout.Milliseconds())
			_ = p.Process(ctx, acks)
			return nil
		})
		return res, acks, err
	}
	res, acks, err := run(reserveScript.EvalSha)
	if redis.HasErrorPrefix(res.Err(), "NOSCRIPT") {
		res, acks, err = run(reserveScript.Eval)
	}
	if err := res.Err(); err != nil {
		s.reloadOnMoved(ctx, err)
		return nil, err
	}
	if err == nil {
		if n, werr := acks.Result(); werr == nil && n < int64(s.wait.replicas) && s.wait.short != nil {
			s.wait.short()
		}
	}
	return res.Slice()
}

// masterFor returns the client of the node that owns key.
func (s *Store) masterFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("replica wait: unsupported redis client %T", s.rdb)
}

// reloadOnMoved asks for a fresh slot map after a command failed (MOVED, a
// failover), so the retries go to the promoted master at once.
func (s *Store) reloadOnMoved(ctx context.Context, err error) {
	if cc, ok := s.rdb.(*redis.ClusterClient); ok && err != nil && !errors.Is(err, redis.Nil) {
		cc.ReloadState(ctx)
	}
}
