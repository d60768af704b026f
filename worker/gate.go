package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/seckill/seckill/queue"
)

// ErrGateClosed is returned for a message held when the worker stops (it comes back).
var ErrGateClosed = errors.New("worker stopping while the order consumer is held")

// Gate holds the order consumer: while held, every handler waits.
type Gate struct {
	mu     sync.Mutex
	held   bool
	open   chan struct{} // closed while the gate is open
	closed chan struct{} // closed by Close
	once   sync.Once
}

// NewGate returns an open gate.
func NewGate() *Gate {
	g := &Gate{open: make(chan struct{}), closed: make(chan struct{})}
	close(g.open)
	return g
}

// Set(true) makes handlers wait; Set(false) lets them through.
func (g *Gate) Set(held bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if held && !g.held {
		g.open = make(chan struct{})
	} else if !held && g.held {
		close(g.open)
	}
	g.held = held
}

func (g *Gate) Held() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.held
}

// Close makes every waiting and later held handler fail with ErrGateClosed.
func (g *Gate) Close() { g.once.Do(func() { close(g.closed) }) }

// Handler wraps h to wait for an open gate; it fails when ctx ends or the gate closes.
func (g *Gate) Handler(h queue.Handler) queue.Handler {
	return func(ctx context.Context, m *primitive.MessageExt) error {
		g.mu.Lock()
		open := g.open
		g.mu.Unlock()
		select {
		case <-open:
		default:
			select {
			case <-open:
			case <-g.closed:
				return ErrGateClosed
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return h(ctx, m)
	}
}
