package nemesis

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// run runs one iproute2 command, its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// install adds lo's clsact qdisc when it is missing and then the filters,
// under the lock that keeps a concurrent heal from removing the qdisc
// between the two.
func install(ctx context.Context, filters []filter) error {
	return withLoLock(func() error {
		if err := ensureClsact(ctx); err != nil {
			return err
		}
		for _, f := range filters {
			if err := run(ctx, "tc", f...); err != nil {
				return err
			}
		}
		return nil
	})
}

func ensureClsact(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, "tc", "qdisc", "show", "dev", "lo").CombinedOutput()
	if err != nil {
		return fmt.Errorf("tc qdisc show dev lo: %v: %s", err, out)
	}
	if strings.Contains(string(out), "clsact") {
		return nil
	}
	return run(ctx, "tc", "qdisc", "add", "dev", "lo", "clsact")
}

// removeFilters deletes slot n's filters: the traffic flows again at once
// (the heal script does it again, harmlessly).
func removeFilters(ctx context.Context, n int) {
	for _, p := range SlotPrefs(n) {
		_ = exec.CommandContext(ctx, "tc", "filter", "del", "dev", "lo", "ingress", "pref", strconv.Itoa(p)).Run()
	}
}

// makeSink creates the ifb whose pfifo holds no packet: what is redirected
// there is dropped, and counted.
func makeSink(ctx context.Context, dev string) error {
	for _, args := range [][]string{
		{"ip", "link", "add", dev, "type", "ifb"},
		{"ip", "link", "set", dev, "addrgenmode", "none", "up"},
		{"tc", "qdisc", "add", "dev", dev, "root", "pfifo", "limit", "0"},
	} {
		if err := run(ctx, args[0], args[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// sinkDrops is how many packets dev's qdisc dropped.
func sinkDrops(ctx context.Context, dev string) (uint64, error) {
	out, err := exec.CommandContext(ctx, "tc", "-s", "-j", "qdisc", "show", "dev", dev).Output()
	if err != nil {
		return 0, fmt.Errorf("tc -s qdisc show dev %s: %w", dev, err)
	}
	var qs []struct {
		Drops uint64 `json:"drops"`
	}
	if err := json.Unmarshal(out, &qs); err != nil {
		return 0, fmt.Errorf("tc -s -j qdisc show dev %s: %w", dev, err)
	}
	var n uint64
	for _, q := range qs {
		n += q.Drops
	}
	return n, nil
}

var (
	prefRE  = regexp.MustCompile(`\bpref (\d+)\b`)
	matchRE = regexp.MustCompile(`^\s+match ([0-9a-f]{8})/([0-9a-f]{8}) at (\d+)$`)
)

// FiltersOn returns the prefs of the tool's filters on lo's ingress that
// match port as a TCP source or destination port: none is left once every
// fault on port has healed.
func FiltersOn(ctx context.Context, port int) ([]int, error) {
	out, err := exec.CommandContext(ctx, "tc", "filter", "show", "dev", "lo", "ingress").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("tc filter show dev lo ingress: %v: %s", err, out)
	}
	dport, sport := fmt.Sprintf("%08x/0000ffff", port), fmt.Sprintf("%08x/ffff0000", port<<16)
	var prefs []int
	pref := 0
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		if m := prefRE.FindStringSubmatch(line); m != nil && strings.HasPrefix(line, "filter ") {
			pref, _ = strconv.Atoi(m[1])
			continue
		}
		m := matchRE.FindStringSubmatch(line)
		if m == nil || pref < PrefFirst || pref > PrefLast || (m[3] != "20" && m[3] != "40") {
			continue
		}
		if key := m[1] + "/" + m[2]; (key == dport || key == sport) && !slices.Contains(prefs, pref) {
			prefs = append(prefs, pref)
		}
	}
	return prefs, nil
}

// InstalledPrefs returns the prefs of the filters on lo's ingress hook
// that are in the tool's range (PrefFirst..PrefLast), each once.
func InstalledPrefs(ctx context.Context) ([]int, error) {
	out, err := exec.CommandContext(ctx, "tc", "filter", "show", "dev", "lo", "ingress").CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "Cannot find") || strings.Contains(string(out), "Invalid handle") {
			return nil, nil // no clsact: no filter
		}
		return nil, fmt.Errorf("tc filter show dev lo ingress: %v: %s", err, out)
	}
	seen := map[int]bool{}
	var prefs []int
	for _, m := range prefRE.FindAllStringSubmatch(string(out), -1) {
		p, _ := strconv.Atoi(m[1])
		if p >= PrefFirst && p <= PrefLast && !seen[p] {
			seen[p] = true
			prefs = append(prefs, p)
		}
	}
	return prefs, nil
}

// Devices returns the network devices of the tool (its ifbs and tuns) that
// exist now.
func Devices() ([]string, error) {
	ents, err := os.ReadDir("/sys/class/net")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), devPrefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// sysctl writes a value under /proc/sys/net/ipv4/conf/<dev>/.
func sysctl(dev, key, value string) error {
	return os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", dev, key), []byte(value), 0o644)
}

// allowRouting lets the kernel take 127.x -> 127.x packets from the delay
// line's tun (to it they are martians otherwise), and zeroes
// net.ipv4.conf.all.rp_filter when it is not, remembering the value for
// the heal that removes the last delay line.
func allowRouting(dev string) error {
	for _, kv := range [][2]string{{"rp_filter", "0"}, {"accept_local", "1"}, {"route_localnet", "1"}} {
		if err := sysctl(dev, kv[0], kv[1]); err != nil {
			return err
		}
	}
	return withLoLock(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter")
		if err != nil {
			return err
		}
		if v := strings.TrimSpace(string(b)); v != "0" {
			saved := filepath.Join(stateDir, "rp_filter")
			if _, err := os.Stat(saved); os.IsNotExist(err) {
				if err := os.WriteFile(saved, []byte(v+"\n"), 0o644); err != nil {
					return err
				}
			}
			return sysctl("all", "rp_filter", "0")
		}
		return nil
	})
}
