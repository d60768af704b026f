// Command seckill-nemesis makes the faults a network makes on the loopback
// interface, by hand or from a script: a partition of TCP ports (cut), lost
// requests, lost replies, latency (delay), and a frozen process (pause). A
// fault holds for --for, or until SIGINT/SIGTERM, then heals; it heals too
// when this process is killed with SIGKILL (a watchdog does it), and
// `seckill-nemesis heal` removes whatever a fault left. It needs root. A
// binary of its own: the seckill binary does not link it. See
// docs/reliability.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/seckill/seckill/internal/nemesis"
)

const usage = `usage: seckill-nemesis FAULT [flags]     (as root)

faults, on TCP ports of lo (each packet dropped silently: no reset, TCP retransmits):
  cut       --ports P[,P..]          drop every packet to and from the ports (IPv4 and IPv6)
  requests  --ports P[,P..]          drop only the packets to the ports: the server never hears
  replies   --ports P[,P..]          drop only the packets from the ports: the server acts, its answers vanish
  delay     --ports P[,P..] --ms N   hold every packet to and from the ports N ms each way (IPv4)
  pause     --pid PID[,PID..]        stop the processes (SIGSTOP) and continue them (SIGCONT) at the heal
  heal                               stop running seckill-nemesis faults, remove every leftover of the tool

flags:
  --ports P[,P..]      the TCP ports (cut, requests, replies, delay)
  --client A[,A..]     only the packets of clients at these addresses (127.0.0.N): one link, not every client
  --server A[,A..]     only the packets of servers at these addresses
  --ms N               delay: milliseconds each way (a round trip takes 2N more)
  --pid PID[,PID..]    pause: the processes
  --for D              hold D (30s, 2m), then heal; default: until SIGINT, SIGTERM or 'seckill-nemesis heal'

A fault heals on exit, on SIGINT/SIGTERM/SIGHUP, and by its watchdog when this process is killed.
Exit status: 0 healed, 1 the fault failed, 2 a usage error or this process cannot make faults.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// options is one fault's command line.
type options struct {
	fault string
	link  nemesis.Link
	delay time.Duration
	pids  []int
	hold  time.Duration
}

var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, errUsage) {
			_, _ = fmt.Fprint(stderr, usage)
		} else {
			_, _ = fmt.Fprintf(stderr, "seckill-nemesis: %v (seckill-nemesis --help tells the faults and flags)\n", err)
		}
		return 2
	}
	if err := nemesis.CanRun(); err != nil {
		_, _ = fmt.Fprintf(stderr, "seckill-nemesis: cannot run: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if o.fault == "heal" {
		return heal(ctx, log)
	}
	warnEphemeral(log, o.link.Ports)
	f, err := start(ctx, o)
	if err != nil {
		log.Error("the fault failed", "fault", o.fault, "err", err)
		return 1
	}
	until := "SIGINT, SIGTERM or 'seckill-nemesis heal'"
	if o.hold > 0 {
		until = o.hold.String()
	}
	log.Info("fault on", "fault", f.String(), "slot", f.Slot(), "prefs", nemesis.SlotPrefs(f.Slot()),
		"pid", os.Getpid(), "watchdog", f.WatchdogPID(), "until", until)
	return hold(ctx, log, f, o.hold)
}

func start(ctx context.Context, o options) (*nemesis.Fault, error) {
	switch o.fault {
	case "cut":
		return nemesis.Cut(ctx, o.link)
	case "requests":
		return nemesis.Requests(ctx, o.link)
	case "replies":
		return nemesis.Replies(ctx, o.link)
	case "delay":
		return nemesis.Delay(ctx, o.link, o.delay)
	default:
		return nemesis.Pause(ctx, o.pids...)
	}
}

// hold keeps the fault until its time is up, a signal, or its own end (a
// killed watchdog, a failed delay line), then heals it.
func hold(ctx context.Context, log *slog.Logger, f *nemesis.Fault, d time.Duration) int {
	var timeUp <-chan time.Time
	if d > 0 {
		timeUp = time.After(d)
	}
	why := ""
	select {
	case <-timeUp:
		why = "time up"
	case <-ctx.Done():
		why = "signal"
	case <-f.Done():
		why = "the fault ended on its own"
	}
	st, err := f.Heal()
	if err != nil {
		log.Error("heal", "fault", f.String(), "err", err)
		return 1
	}
	attrs := []any{"fault", f.String(), "why", why, "held", st.Held.Round(time.Millisecond)}
	switch f.Kind() {
	case nemesis.KindDelay:
		attrs = append(attrs, "delayed_packets", st.Delayed, "dropped_packets", st.Dropped)
	case nemesis.KindPause:
	default:
		attrs = append(attrs, "dropped_packets", st.Dropped)
	}
	log.Info("healed", attrs...)
	if why == "the fault ended on its own" {
		return 1
	}
	return 0
}

func heal(ctx context.Context, log *slog.Logger) int {
	live, err := nemesis.HealLeftovers(ctx, log)
	if err != nil {
		log.Error("heal", "err", err)
		return 1
	}
	prefs, err := nemesis.InstalledPrefs(ctx)
	if err != nil {
		log.Error("heal", "err", err)
		return 1
	}
	devs, _ := nemesis.Devices()
	log.Info("healed", "live_faults_of_other_processes", len(live), "prefs_left", prefs, "devices_left", devs)
	return 0
}

// warnEphemeral: a port of the ephemeral range is also some client
// sockets' local port, and their packets match the fault too.
func warnEphemeral(log *slog.Logger, ports []int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return
	}
	lo, _ := strconv.Atoi(f[0])
	hi, _ := strconv.Atoi(f[1])
	for _, p := range ports {
		if p >= lo && p <= hi {
			log.Warn("the port is in the ephemeral range: client sockets using it as their local port are hit too", "port", p, "range", fmt.Sprintf("%d-%d", lo, hi))
		}
	}
}

func parse(args []string, stderr io.Writer) (options, error) {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		return options{}, errUsage
	}
	o := options{fault: args[0]}
	switch o.fault {
	case "cut", "requests", "replies", "delay", "pause", "heal":
	default:
		return o, fmt.Errorf("unknown fault %q", o.fault)
	}
	fs := flag.NewFlagSet(o.fault, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ports := fs.String("ports", "", "")
	clients := fs.String("client", "", "")
	servers := fs.String("server", "", "")
	ms := fs.Int("ms", 0, "")
	pids := fs.String("pid", "", "")
	fs.DurationVar(&o.hold, "for", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.hold < 0 {
		return o, fmt.Errorf("--for %v: give a positive duration", o.hold)
	}
	return o, o.check(*ports, *clients, *servers, *pids, *ms, fs)
}

// check fills o from the flags its fault takes and refuses the others.
func (o *options) check(ports, clients, servers, pids string, ms int, fs *flag.FlagSet) error {
	allowed := map[string][]string{
		"cut": {"ports", "client", "server", "for"}, "requests": {"ports", "client", "server", "for"},
		"replies": {"ports", "client", "server", "for"}, "delay": {"ports", "client", "server", "ms", "for"},
		"pause": {"pid", "for"}, "heal": {},
	}[o.fault]
	var bad error
	fs.Visit(func(f *flag.Flag) {
		for _, a := range allowed {
			if a == f.Name {
				return
			}
		}
		bad = errors.Join(bad, fmt.Errorf("%s takes no --%s", o.fault, f.Name))
	})
	if bad != nil {
		return bad
	}
	var err error
	switch o.fault {
	case "pause":
		if o.pids, err = ints(pids); err != nil {
			err = fmt.Errorf("--pid: %w", err)
		} else if len(o.pids) == 0 {
			err = errors.New("pause needs --pid")
		}
	case "cut", "requests", "replies", "delay":
		err = o.checkLink(ports, clients, servers, ms)
	}
	return err
}

func (o *options) checkLink(ports, clients, servers string, ms int) error {
	ps, err := ints(ports)
	if err != nil {
		return fmt.Errorf("--ports: %w", err)
	}
	if len(ps) == 0 {
		return fmt.Errorf("%s needs --ports", o.fault)
	}
	cs, err := addrList(clients)
	if err != nil {
		return fmt.Errorf("--client: %w", err)
	}
	ss, err := addrList(servers)
	if err != nil {
		return fmt.Errorf("--server: %w", err)
	}
	o.link = nemesis.Ports(ps...).Client(cs...).Server(ss...)
	if err := o.link.Validate(); err != nil {
		return err
	}
	if o.fault == "delay" {
		if ms <= 0 || ms > 60000 {
			return errors.New("delay needs --ms, the milliseconds each way (1 to 60000)")
		}
		o.delay = time.Duration(ms) * time.Millisecond
	}
	return nil
}

func ints(list string) ([]int, error) {
	var out []int
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", s)
		}
		out = append(out, n)
	}
	return out, nil
}

func addrList(list string) ([]netip.Addr, error) {
	var out []netip.Addr
	for s := range strings.SplitSeq(list, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}
