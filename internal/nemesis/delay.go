package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// queueLen bounds the packets a delay line holds; past it a packet is
// dropped (and counted), as a full router queue drops.
const queueLen = 1 << 16

type packet struct {
	due time.Time
	b   []byte
}

// delayLine reads the packets lo's filters redirect into its tun and writes
// each back d later, in the order they came: written to a tun, a packet
// arrives as if received on it.
type delayLine struct {
	tun     *os.File
	d       time.Duration
	q       chan packet
	stop    chan struct{}
	wg      sync.WaitGroup
	held    atomic.Int64 // packets in the line: queued or waiting in write
	delayed atomic.Uint64
	dropped atomic.Uint64

	failOnce sync.Once
	failed   chan struct{}
	err      error
}

// openTun creates the tun dev (IFF_TUN: IP packets, IFF_NO_PI: no header).
// It is not persistent: it goes when its file is closed, by Close or by
// this process's death.
func openTun(dev string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(dev)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
	}
	if err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF %s: %w", dev, err)
	}
	return os.NewFile(uintptr(fd), "/dev/net/tun:"+dev), nil // non-blocking: Go's poller reads it
}

// startDelayLine opens dev's tun, brings it up and starts the line.
func startDelayLine(ctx context.Context, dev string, d time.Duration) (*delayLine, error) {
	tun, err := openTun(dev)
	if err != nil {
		return nil, err
	}
	l := &delayLine{tun: tun, d: d, q: make(chan packet, queueLen), stop: make(chan struct{}), failed: make(chan struct{})}
	// No IPv6 on the tun: nothing of the kernel's own (multicast reports)
	// goes into the line, and its counters count the link's packets alone.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
	if err := run(ctx, "ip", "link", "set", "dev", dev, "mtu", "65535", "txqueuelen", "10000", "up"); err != nil {
		_ = tun.Close()
		return nil, err
	}
	if err := allowRouting(dev); err != nil {
		_ = tun.Close()
		return nil, err
	}
	l.wg.Add(2)
	go l.read()
	go l.write()
	return l, nil
}

func (l *delayLine) fail(err error) {
	l.failOnce.Do(func() { l.err = err; close(l.failed) })
}

func (l *delayLine) read() {
	defer l.wg.Done()
	buf := make([]byte, 1<<16+4096)
	for {
		n, err := l.tun.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				l.fail(fmt.Errorf("delay line: read: %w", err))
			}
			return
		}
		l.held.Add(1)
		select {
		case l.q <- packet{due: time.Now().Add(l.d), b: append([]byte(nil), buf[:n]...)}:
		default:
			l.held.Add(-1)
			l.dropped.Add(1)
		}
	}
}

func (l *delayLine) write() {
	defer l.wg.Done()
	t := time.NewTimer(0)
	<-t.C
	for {
		var p packet
		select {
		case p = <-l.q:
		case <-l.stop:
			return
		}
		if wait := time.Until(p.due); wait > 0 {
			t.Reset(wait)
			select {
			case <-t.C:
			case <-l.stop:
				return
			}
		}
		_, err := l.tun.Write(p.b)
		l.held.Add(-1)
		switch {
		case errors.Is(err, os.ErrClosed):
			return
		case err != nil:
			l.dropped.Add(1) // the kernel refused it (a malformed or unroutable packet): lost, as on a wire
		default:
			l.delayed.Add(1)
		}
	}
}

// close lets the packets in the line arrive (at most d and a little more;
// the filters are gone, so no new one comes in), then closes the tun.
func (l *delayLine) close() {
	deadline := time.Now().Add(l.d + 200*time.Millisecond)
	for l.held.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	close(l.stop)
	_ = l.tun.Close()
	l.wg.Wait()
}
