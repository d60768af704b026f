// Package nemesis makes the faults a network makes, with the kernel, on the
// loopback interface, and freezes processes: a partition (every packet of a
// link dropped, silently: no reset, connections hang and TCP retransmits),
// lost requests, lost replies (the server acts, the client cannot know),
// latency, and a pause (SIGSTOP/SIGCONT: a frozen VM, a long GC).
//
// How: this kernel has no netem and loads no modules. u32 filters on lo's
// clsact ingress hook redirect a link's packets (tc mirred) into an ifb
// whose pfifo holds no packet (a drop, counted), or into a tun read by a
// delay line in this process. A fault holds a slot (SlotPrefs, its own
// devices) so several run side by side, and a watchdog process that heals
// it when its maker heals, exits, or is killed, even with SIGKILL.
//
// It needs root (iproute2's tc and ip, /dev/net/tun, signals to any
// process): CanRun says whether this process can. `seckill-nemesis` is
// its command; testkit.Nemesis gives it to tests.
package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Kind is a fault's kind.
type Kind string

const (
	KindCut      Kind = "cut"      // every packet to and from the ports dropped
	KindRequests Kind = "requests" // packets to the ports dropped
	KindReplies  Kind = "replies"  // packets from the ports dropped
	KindDelay    Kind = "delay"    // packets to and from the ports held d each way
	KindPause    Kind = "pause"    // processes stopped
)

// ErrNotRoot: the faults change lo's traffic control and links and signal
// other processes; only root can.
var ErrNotRoot = errors.New("needs root: it changes lo's traffic control and network devices (tc, ip), opens /dev/net/tun and signals other processes")

// CanRun says why this process cannot make faults, or nil.
func CanRun() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, tool := range []string{"tc", "ip", "flock", "/bin/sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s (iproute2, util-linux): %w", tool, err)
		}
	}
	return nil
}

// Fault is a fault that holds until Heal.
type Fault struct {
	kind    Kind
	what    string
	slot    *slot
	line    *delayLine
	started time.Time

	doneOnce sync.Once
	done     chan struct{}

	healOnce sync.Once
	healed   Stats
	healErr  error
}

// Stats is what a fault did so far.
type Stats struct {
	Held    time.Duration
	Dropped uint64 // packets dropped (cut, requests, replies; a delay line's overflow)
	Delayed uint64 // packets a delay line held and passed on
}

// Cut drops every packet to and from l's ports: a partition. New
// connections time out, open ones hang; nobody gets a reset.
func Cut(ctx context.Context, l Link) (*Fault, error) {
	return drop(ctx, KindCut, l, toPort, fromPort)
}

// Requests drops the packets to l's ports: the server never hears, and the
// client's TCP retransmits until it gives up.
func Requests(ctx context.Context, l Link) (*Fault, error) {
	return drop(ctx, KindRequests, l, toPort)
}

// Replies drops the packets from l's ports: the server gets every request
// of an open connection and acts on it, and its answers (and ACKs) vanish.
// A new connection cannot open (its SYN-ACK vanishes too).
func Replies(ctx context.Context, l Link) (*Fault, error) {
	return drop(ctx, KindReplies, l, fromPort)
}

func drop(ctx context.Context, kind Kind, l Link, dirs ...direction) (*Fault, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return start(ctx, kind, l.String(), func(f *Fault) error {
		n := f.slot.n
		filters := l.filters(n, dirs, []family{ipv4, ipv6}, sinkDev(n))
		if len(filters) == 0 {
			return errors.New("no filter: the link's clients and servers are of different IP versions")
		}
		if err := makeSink(ctx, sinkDev(n)); err != nil {
			return err
		}
		return install(ctx, filters)
	})
}

// Delay holds every IPv4 packet to and from l's ports d before it goes on
// (a round trip takes 2d more), in order. IPv6 is not delayed: the kernel
// takes no ::1 packet from any device but lo.
func Delay(ctx context.Context, l Link, d time.Duration) (*Fault, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if d <= 0 || d > time.Minute {
		return nil, fmt.Errorf("delay %v: give 1ms to 1m", d)
	}
	return start(ctx, KindDelay, fmt.Sprintf("%s +%v each way (IPv4)", l, d), func(f *Fault) error {
		n := f.slot.n
		filters := l.filters(n, []direction{toPort, fromPort}, []family{ipv4}, delayDev(n))
		if len(filters) == 0 {
			return errors.New("no filter: a delay holds IPv4 only, and the link names only IPv6 addresses")
		}
		line, err := startDelayLine(ctx, delayDev(n), d)
		if err != nil {
			return err
		}
		f.line = line
		go func() {
			select {
			case <-line.failed:
				f.finish()
			case <-f.done:
			}
		}()
		return install(ctx, filters)
	})
}

// Pause stops the processes (SIGSTOP) until Heal continues them.
func Pause(ctx context.Context, pids ...int) (*Fault, error) {
	if len(pids) == 0 {
		return nil, errors.New("no pid to pause")
	}
	for _, pid := range pids {
		if pid <= 1 || pid == os.Getpid() {
			return nil, fmt.Errorf("pid %d: not a process this tool may pause", pid)
		}
		if err := syscall.Kill(pid, 0); err != nil {
			return nil, fmt.Errorf("pid %d: %w", pid, err)
		}
	}
	return start(ctx, KindPause, fmt.Sprintf("pids %v", pids), func(f *Fault) error {
		for _, pid := range pids {
			if err := f.slot.recordPause(pid); err != nil {
				return err
			}
			if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
				return fmt.Errorf("SIGSTOP %d: %w", pid, err)
			}
		}
		return nil
	})
}

// start takes a slot, arms its watchdog, then makes the fault with set; on
// an error everything set made is healed.
func start(ctx context.Context, kind Kind, what string, set func(*Fault) error) (*Fault, error) {
	if err := CanRun(); err != nil {
		return nil, err
	}
	s, err := acquire(ctx)
	if err != nil {
		return nil, err
	}
	f := &Fault{kind: kind, what: what, slot: s, done: make(chan struct{})}
	if err := s.startGuard(os.Stderr); err != nil {
		return nil, errors.Join(err, s.release(context.WithoutCancel(ctx)))
	}
	go func() {
		<-s.done
		f.finish()
	}()
	if err := s.record(kind, what); err != nil {
		return nil, errors.Join(err, f.heal(context.WithoutCancel(ctx)))
	}
	if err := set(f); err != nil {
		return nil, errors.Join(fmt.Errorf("%s %s: %w", kind, what, err), f.heal(context.WithoutCancel(ctx)))
	}
	f.started = time.Now()
	return f, nil
}

func (f *Fault) finish() { f.doneOnce.Do(func() { close(f.done) }) }

func (f *Fault) String() string { return fmt.Sprintf("%s %s (slot %d)", f.kind, f.what, f.slot.n) }

// Kind is the fault's kind.
func (f *Fault) Kind() Kind { return f.kind }

// Slot is the fault's slot: its filters are SlotPrefs(Slot()).
func (f *Fault) Slot() int { return f.slot.n }

// WatchdogPID is the process that heals the fault if this one dies.
func (f *Fault) WatchdogPID() int { return f.slot.guard.Process.Pid }

// Done is closed when the fault ended or lost its guard before Heal: its
// watchdog ended (killed), or its delay line failed. Heal then says why.
func (f *Fault) Done() <-chan struct{} { return f.done }

// Stats is what the fault did so far.
func (f *Fault) Stats(ctx context.Context) (Stats, error) {
	st := Stats{Held: time.Since(f.started)}
	var err error
	switch f.kind {
	case KindCut, KindRequests, KindReplies:
		st.Dropped, err = sinkDrops(ctx, sinkDev(f.slot.n))
	case KindDelay:
		st.Delayed, st.Dropped = f.line.delayed.Load(), f.line.dropped.Load()
	}
	return st, err
}

// Heal ends the fault and removes everything it added; it returns what the
// fault did. Only the first call heals; later ones return its result.
func (f *Fault) Heal() (Stats, error) {
	f.healOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		removeFilters(ctx, f.slot.n) // traffic flows again now
		st, err := f.Stats(ctx)
		select {
		case <-f.done: // ended on its own: its devices (and counters) may be gone
			err = nil
		default:
		}
		f.healed, f.healErr = st, errors.Join(err, f.heal(ctx))
	})
	return f.healed, f.healErr
}

// heal drains and closes the delay line, then has the watchdog heal the
// slot and frees it.
func (f *Fault) heal(ctx context.Context) error {
	var lineErr error
	if f.line != nil {
		select {
		case <-f.line.failed:
			lineErr = f.line.err
		default:
		}
		f.line.close()
	}
	err := errors.Join(lineErr, f.slot.release(ctx))
	f.finish()
	if err != nil {
		return fmt.Errorf("heal %s: %w", strings.TrimSpace(f.String()), err)
	}
	return nil
}
