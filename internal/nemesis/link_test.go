package nemesis

import (
	"net/netip"
	"os/exec"
	"strings"
	"testing"
)

func TestFiltersMatchPortsAddressesAndDirections(t *testing.T) {
	a2, a1, v6 := netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")
	cases := []struct {
		name string
		l    Link
		dirs []direction
		fams []family
		want []string
	}{{
		name: "a cut of two ports, both families",
		l:    Ports(3306, 6379), dirs: []direction{toPort, fromPort}, fams: []family{ipv4, ipv6},
		want: []string{
			"pref 48644 protocol ip u32 match ip protocol 6 0xff match ip ihl 5 0xf match ip dport 3306 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48644 protocol ip u32 match ip protocol 6 0xff match ip ihl 5 0xf match ip dport 6379 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48645 protocol ip u32 match ip protocol 6 0xff match ip ihl 5 0xf match ip sport 3306 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48645 protocol ip u32 match ip protocol 6 0xff match ip ihl 5 0xf match ip sport 6379 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48646 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 dport 3306 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48646 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 dport 6379 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48647 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 sport 3306 0xffff action mirred egress redirect dev nemesis-drop1",
			"pref 48647 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 sport 6379 0xffff action mirred egress redirect dev nemesis-drop1",
		},
	}, {
		name: "replies of one link: from the server to the client; no IPv6 filter for IPv4 addresses",
		l:    Ports(3306).Client(a2).Server(a1), dirs: []direction{fromPort}, fams: []family{ipv4, ipv6},
		want: []string{
			"pref 48645 protocol ip u32 match ip protocol 6 0xff match ip ihl 5 0xf match ip sport 3306 0xffff match ip src 127.0.0.1/32 match ip dst 127.0.0.2/32 action mirred egress redirect dev nemesis-drop1",
		},
	}, {
		name: "requests from an IPv6 client",
		l:    Ports(80).Client(v6), dirs: []direction{toPort}, fams: []family{ipv4, ipv6},
		want: []string{
			"pref 48646 protocol ipv6 u32 match ip6 protocol 6 0xff match ip6 dport 80 0xffff match ip6 src ::1/128 action mirred egress redirect dev nemesis-drop1",
		},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, f := range c.l.filters(1, c.dirs, c.fams, sinkDev(1)) {
				got = append(got, strings.TrimPrefix(strings.Join(f, " "), "filter add dev lo ingress "))
			}
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("filters:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			}
		})
	}
}

func TestLinkValidate(t *testing.T) {
	for _, l := range []Link{{}, Ports(0), Ports(65536), Ports(80).Client(netip.Addr{})} {
		if err := l.Validate(); err == nil {
			t.Errorf("%v: no error", l)
		}
	}
	if err := Ports(1, 65535).Client(netip.MustParseAddr("127.0.0.9")).Validate(); err != nil {
		t.Error(err)
	}
}

// The prefs of the slots never overlap and stay in the reserved range; the
// devices' names fit IFNAMSIZ.
func TestSlotsReserveTheirOwnNames(t *testing.T) {
	seen := map[int]bool{}
	for n := range Slots {
		for _, p := range SlotPrefs(n) {
			if seen[p] || p < PrefFirst || p > PrefLast {
				t.Errorf("slot %d: pref %d reused or out of %d..%d", n, p, PrefFirst, PrefLast)
			}
			seen[p] = true
		}
		for _, d := range []string{sinkDev(n), delayDev(n)} {
			if len(d) > 15 {
				t.Errorf("device name %q is longer than 15 bytes", d)
			}
		}
	}
}

// The heal and the watchdog are shell scripts: they parse.
func TestScriptsParse(t *testing.T) {
	for _, s := range []string{healScript(Slots - 1), guardScript(0, 42)} {
		if out, err := exec.Command("/bin/sh", "-n", "-c", s).CombinedOutput(); err != nil {
			t.Errorf("sh -n: %v: %s\n%s", err, out, s)
		}
	}
}
