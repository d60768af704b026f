package nemesis_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seckill/seckill/internal/nemesis"
	"github.com/seckill/seckill/testkit"
)

// Every test here runs on the real kernel with real sockets, as root (they
// skip saying why otherwise), against an echo server on a port of its own.

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string, from netip.Addr) *client {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	if from.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &client{c, bufio.NewReader(c)}
}

// send writes one line.
func (c *client) send(t *testing.T) {
	t.Helper()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// answer reads one line's echo within d and says how long it took.
func (c *client) answer(d time.Duration) (time.Duration, error) {
	t0 := time.Now()
	_ = c.SetReadDeadline(t0.Add(d))
	line, err := c.r.ReadString('\n')
	if err == nil && line != "ping\n" {
		err = errors.New("echo: got " + line)
	}
	return time.Since(t0), err
}

func (c *client) roundTrip(t *testing.T, d time.Duration) (time.Duration, error) {
	t.Helper()
	t0 := time.Now()
	c.send(t)
	_, err := c.answer(d)
	return time.Since(t0), err
}

// waitFor polls cond until it holds or within has passed.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangs: the error is a timeout, not a reset or a refusal: the packets
// vanished.
func hangs(t *testing.T, err error, what string) {
	t.Helper()
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%s: got %v, want a timeout (packets dropped silently)", what, err)
	}
}

func dropped(t *testing.T, f *nemesis.Fault) uint64 {
	t.Helper()
	st, err := f.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Dropped
}

// healed: no filter of the tool matches port any more, and the fault's
// slot left nothing (unless another fault holds it already).
func healed(t *testing.T, f *nemesis.Fault, port int) {
	t.Helper()
	ctx := context.Background()
	if prefs, err := nemesis.FiltersOn(ctx, port); err != nil || len(prefs) > 0 {
		t.Errorf("after the heal, filters on :%d: prefs %v (%v)", port, prefs, err)
	}
	if left, held, err := nemesis.SlotLeftovers(ctx, f.Slot()); err != nil || (!held && len(left) > 0) {
		t.Errorf("after the heal, slot %d left %v (%v)", f.Slot(), left, err)
	}
}

func TestCutDropsSilentlyBothWaysAndHeals(t *testing.T) {
	nem := testkit.Nemesis(t)
	e := testkit.Echo(t)
	c := dial(t, e.Addr, netip.Addr{})
	if _, err := c.roundTrip(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	f := nem.Cut(nemesis.Ports(e.Port))

	_, err := c.roundTrip(t, 700*time.Millisecond)
	hangs(t, err, "a round trip on an open connection")
	waitFor(t, 5*time.Second, "the cut counts a dropped packet", func() bool { return dropped(t, f) > 0 })
	_, err = net.DialTimeout("tcp", e.Addr, 500*time.Millisecond)
	hangs(t, err, "a new connection")
	if e.Addr6 != "" {
		_, err = net.DialTimeout("tcp", e.Addr6, 300*time.Millisecond)
		hangs(t, err, "a new IPv6 connection")
	}

	st, err := f.Heal()
	if err != nil {
		t.Fatal(err)
	}
	if st.Dropped == 0 {
		t.Errorf("healed: %+v, want packets dropped", st)
	}
	healed(t, f, e.Port)
	// The line sent during the cut arrives by TCP's retransmission, and
	// its echo comes back: the connection survived.
	if _, err := c.answer(5 * time.Second); err != nil {
		t.Fatalf("the echo of the line sent during the cut, after the heal: %v", err)
	}
	if d, err := c.roundTrip(t, time.Second); err != nil || d > 200*time.Millisecond {
		t.Fatalf("a round trip after the heal: %v, %v", d, err)
	}
	for _, addr := range []string{e.Addr, e.Addr6} {
		if addr == "" {
			continue
		}
		if _, err := dial(t, addr, netip.Addr{}).roundTrip(t, time.Second); err != nil {
			t.Fatalf("a new connection to %s after the heal: %v", addr, err)
		}
	}
}

func TestRepliesLostAfterTheServerActed(t *testing.T) {
	nem := testkit.Nemesis(t)
	e := testkit.Echo(t)
	c := dial(t, e.Addr, netip.Addr{})
	if _, err := c.roundTrip(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	f := nem.Replies(nemesis.Ports(e.Port))

	c.send(t)
	waitFor(t, 3*time.Second, "the server receives the request", func() bool { return e.Received() == 2 })
	_, err := c.answer(500 * time.Millisecond)
	hangs(t, err, "the answer")
	waitFor(t, 3*time.Second, "the replies' packets are dropped", func() bool { return dropped(t, f) > 0 })

	if _, err := f.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, f, e.Port)
	if _, err := c.answer(5 * time.Second); err != nil {
		t.Fatalf("the answer after the heal: %v", err)
	}
	if n := e.Received(); n != 2 {
		t.Errorf("the server received %d lines, want 2 (a request's retransmissions are one request)", n)
	}
}

func TestRequestsNeverArrive(t *testing.T) {
	nem := testkit.Nemesis(t)
	e := testkit.Echo(t)
	c := dial(t, e.Addr, netip.Addr{})
	if _, err := c.roundTrip(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	f := nem.Requests(nemesis.Ports(e.Port))

	c.send(t)
	waitFor(t, 3*time.Second, "the request's packets are dropped", func() bool { return dropped(t, f) > 0 })
	_, err := c.answer(300 * time.Millisecond)
	hangs(t, err, "the answer")
	if n := e.Received(); n != 1 {
		t.Fatalf("the server received %d lines during the fault, want 1 (the one before it)", n)
	}
	_, err = net.DialTimeout("tcp", e.Addr, 300*time.Millisecond)
	hangs(t, err, "a new connection")

	if _, err := f.Heal(); err != nil {
		t.Fatal(err)
	}
	healed(t, f, e.Port)
	if _, err := c.answer(5 * time.Second); err != nil {
		t.Fatalf("the answer after the heal: %v", err)
	}
	if n := e.Received(); n != 2 {
		t.Errorf("the server received %d lines, want 2", n)
	}
}

func TestDelayHoldsEachWay(t *testing.T) {
	nem := testkit.Nemesis(t)
	e := testkit.Echo(t)
	c := dial(t, e.Addr, netip.Addr{})
	if _, err := c.roundTrip(t, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	f := nem.Delay(nemesis.Ports(e.Port), 100*time.Millisecond)

	for range 3 {
		d, err := c.roundTrip(t, 2*time.Second)
		if err != nil || d < 200*time.Millisecond || d >= time.Second {
			t.Fatalf("a round trip with 100 ms each way: %v, %v; want 200 ms to 1 s", d, err)
		}
	}
	c2 := dial(t, e.Addr, netip.Addr{}) // the handshake is delayed too, and completes
	if d, err := c2.roundTrip(t, 2*time.Second); err != nil || d < 200*time.Millisecond {
		t.Fatalf("a new connection's round trip: %v, %v", d, err)
	}

	st, err := f.Heal()
	if err != nil {
		t.Fatal(err)
	}
	if st.Delayed < 6 || st.Dropped != 0 {
		t.Errorf("healed: %+v, want the round trips' packets delayed, none dropped", st)
	}
	healed(t, f, e.Port)
	if d, err := c.roundTrip(t, time.Second); err != nil || d >= 50*time.Millisecond {
		t.Fatalf("a round trip after the heal: %v, %v; want under 50 ms", d, err)
	}
}

// The delay line carries lo's large packets (up to 64 KB) whole, in order.
func TestDelayCarriesBulkIntact(t *testing.T) {
	nem := testkit.Nemesis(t)
	e := testkit.Echo(t)
	c := dial(t, e.Addr, netip.Addr{})
	f := nem.Delay(nemesis.Ports(e.Port), 10*time.Millisecond)
	line := append(bytes.Repeat([]byte("0123456789abcdef"), 1<<16), '\n') // 1 MiB
	go func() { _, _ = c.Write(line) }()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got := make([]byte, len(line))
	if _, err := io.ReadFull(c.r, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, line) {
		t.Fatal("the echo of 1 MiB through the delay line differs")
	}
	if st, err := f.Heal(); err != nil || st.Delayed == 0 || st.Dropped != 0 {
		t.Fatalf("healed: %+v, %v", st, err)
	}
}

// procState is the state letter of /proc/PID/stat (T: stopped).
func procState(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return rest[:1]
}

func TestPauseStopsAndContinues(t *testing.T) {
	nem := testkit.Nemesis(t)
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleeper.Process.Kill(); _ = sleeper.Wait() })
	pid := sleeper.Process.Pid
	f := nem.Pause(pid)
	waitFor(t, 3*time.Second, "the process is stopped (state T)", func() bool { return procState(t, pid) == "T" })
	if _, err := f.Heal(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the process runs again", func() bool { return procState(t, pid) != "T" })
	if left, held, err := nemesis.SlotLeftovers(context.Background(), f.Slot()); err != nil || (!held && len(left) > 0) {
		t.Errorf("after the heal, slot %d left %v (%v)", f.Slot(), left, err)
	}
}

// One link faulted, not every client of the port: a cut of the client at
// 127.0.0.2 leaves the client at 127.0.0.3 alone, while a second fault
// (a delay on another server's port) holds side by side.
func TestCutOneClientAddressBesideAnotherFault(t *testing.T) {
	nem := testkit.Nemesis(t)
	e, other := testkit.Echo(t), testkit.Echo(t)
	cut, spared := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.3")
	victim := dial(t, e.Addr, cut)
	f := nem.Cut(nemesis.Ports(e.Port).Client(cut))
	g := nem.Delay(nemesis.Ports(other.Port), 50*time.Millisecond)
	if f.Slot() == g.Slot() {
		t.Fatalf("two faults in slot %d", f.Slot())
	}

	_, err := victim.roundTrip(t, 500*time.Millisecond)
	hangs(t, err, "the cut client's round trip")
	if _, err := dial(t, e.Addr, spared).roundTrip(t, time.Second); err != nil {
		t.Fatalf("another client of the port: %v", err)
	}
	if d, err := dial(t, other.Addr, netip.Addr{}).roundTrip(t, 2*time.Second); err != nil || d < 100*time.Millisecond {
		t.Fatalf("the delayed server's round trip: %v, %v", d, err)
	}
	for _, x := range []*nemesis.Fault{f, g} {
		if _, err := x.Heal(); err != nil {
			t.Fatal(err)
		}
	}
	healed(t, f, e.Port)
	healed(t, g, other.Port)
	if _, err := victim.answer(5 * time.Second); err != nil {
		t.Fatalf("the cut client after the heal: %v", err)
	}
}
