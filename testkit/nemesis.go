package testkit

import (
	"bufio"
	"errors"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/nemesis"
)

// Nem makes kernel network faults and pauses for one test; each fault is
// healed at the test's cleanup (earlier by its Heal).
type Nem struct{ t testing.TB }

// Nemesis gives t the nemesis, or skips t saying why this process cannot
// make faults (not root, no tc or ip).
func Nemesis(t testing.TB) *Nem {
	t.Helper()
	if err := nemesis.CanRun(); err != nil {
		t.Skipf("kernel network faults: %v", err)
	}
	return &Nem{t}
}

// Cut drops every packet to and from l's ports.
func (n *Nem) Cut(l nemesis.Link) *nemesis.Fault {
	n.t.Helper()
	return n.hold(nemesis.Cut(n.t.Context(), l))
}

// Requests drops the packets to l's ports.
func (n *Nem) Requests(l nemesis.Link) *nemesis.Fault {
	n.t.Helper()
	return n.hold(nemesis.Requests(n.t.Context(), l))
}

// Replies drops the packets from l's ports.
func (n *Nem) Replies(l nemesis.Link) *nemesis.Fault {
	n.t.Helper()
	return n.hold(nemesis.Replies(n.t.Context(), l))
}

// Delay holds l's IPv4 packets d each way.
func (n *Nem) Delay(l nemesis.Link, d time.Duration) *nemesis.Fault {
	n.t.Helper()
	return n.hold(nemesis.Delay(n.t.Context(), l, d))
}

// Pause stops the processes until the fault heals.
func (n *Nem) Pause(pids ...int) *nemesis.Fault {
	n.t.Helper()
	return n.hold(nemesis.Pause(n.t.Context(), pids...))
}

func (n *Nem) hold(f *nemesis.Fault, err error) *nemesis.Fault {
	n.t.Helper()
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Logf("nemesis: %s on", f)
	n.t.Cleanup(func() {
		st, err := f.Heal()
		if err != nil {
			n.t.Errorf("nemesis: %v", err)
		}
		n.t.Logf("nemesis: %s healed after %v: %d dropped, %d delayed", f, st.Held.Round(time.Millisecond), st.Dropped, st.Delayed)
	})
	return f
}

// EchoServer is a TCP server that answers every line with itself and
// counts the lines it received: what a fault test watches on the server's
// side.
type EchoServer struct {
	Addr     string // 127.0.0.1:Port
	Addr6    string // [::1]:Port, or "" without IPv6 on lo
	Port     int
	received atomic.Int64
}

// Received is how many lines the server has read.
func (e *EchoServer) Received() int64 { return e.received.Load() }

// Echo starts an EchoServer on 127.0.0.1 and ::1 until the test ends, on a
// port below the ephemeral range: a fault on its port then hits no other
// program's client sockets, whose local ports come from that range.
func Echo(t testing.TB) *EchoServer {
	t.Helper()
	lns, err := listenBelowEphemeral()
	if err != nil {
		t.Fatal(err)
	}
	e := &EchoServer{Addr: lns[0].Addr().String(), Port: lns[0].Addr().(*net.TCPAddr).Port}
	if len(lns) > 1 {
		e.Addr6 = lns[1].Addr().String()
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	for _, ln := range lns {
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
				wg.Go(func() { e.serve(c) })
			}
		})
	}
	t.Cleanup(func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return e
}

// listenBelowEphemeral listens on 127.0.0.1 and, when lo has IPv6, on ::1,
// both on one free port of 20000-31999.
func listenBelowEphemeral() ([]net.Listener, error) {
	var err error
	for range 100 {
		port := strconv.Itoa(20000 + rand.IntN(12000))
		var ln4, ln6 net.Listener
		if ln4, err = net.Listen("tcp", "127.0.0.1:"+port); err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			return nil, err
		}
		if ln6, err = net.Listen("tcp", "[::1]:"+port); err == nil {
			return []net.Listener{ln4, ln6}, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return []net.Listener{ln4}, nil // no IPv6 on lo
		}
		_ = ln4.Close()
	}
	return nil, err
}

func (e *EchoServer) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		e.received.Add(1)
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
	}
}
