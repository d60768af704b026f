package nemesis

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Link is what a network fault hits: TCP packets to and from its ports on
// lo, optionally only between some addresses. A client is the side that
// connects (the source of the packets to the port, the destination of the
// packets from it); a server owns the port. Empty Clients or Servers match
// any address; to fault one link and not every client of a port, give each
// role its own loopback address (127.0.0.N) and name it here.
type Link struct {
	Ports   []int
	Clients []netip.Addr
	Servers []netip.Addr
}

// Ports is the link of every client of these TCP ports.
func Ports(ports ...int) Link { return Link{Ports: slices.Clone(ports)} }

// Client narrows l to the packets of clients at these addresses.
func (l Link) Client(addrs ...netip.Addr) Link {
	l.Clients = append(slices.Clone(l.Clients), addrs...)
	return l
}

// Server narrows l to the packets of servers at these addresses.
func (l Link) Server(addrs ...netip.Addr) Link {
	l.Servers = append(slices.Clone(l.Servers), addrs...)
	return l
}

func (l Link) String() string {
	ports := make([]string, len(l.Ports))
	for i, p := range l.Ports {
		ports[i] = strconv.Itoa(p)
	}
	s := ":" + strings.Join(ports, ",")
	if len(l.Clients) > 0 {
		s += " client " + joinAddrs(l.Clients)
	}
	if len(l.Servers) > 0 {
		s += " server " + joinAddrs(l.Servers)
	}
	return s
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// Validate says what is wrong with l, or nil.
func (l Link) Validate() error {
	if len(l.Ports) == 0 {
		return errors.New("no port: a network fault needs at least one TCP port")
	}
	for _, p := range l.Ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("port %d: a TCP port is 1-65535", p)
		}
	}
	for _, a := range slices.Concat(l.Clients, l.Servers) {
		if !a.IsValid() || a.Zone() != "" {
			return fmt.Errorf("address %q: give a plain IPv4 or IPv6 address", a)
		}
	}
	return nil
}

// family is one IP version's u32 vocabulary. IPv4 ports sit at offset 20
// only without IP options (ihl 5); IPv6's at 40 only when TCP is the next
// header (no extension headers): both hold on loopback.
type family struct {
	proto, match string // tc's "protocol", u32's "match ip|ip6"
	hostBits     int
	fixed        []string // matches every filter of the family carries
	is           func(netip.Addr) bool
}

var (
	ipv4 = family{"ip", "ip", 32, []string{"match", "ip", "protocol", "6", "0xff", "match", "ip", "ihl", "5", "0xf"}, netip.Addr.Is4}
	ipv6 = family{"ipv6", "ip6", 128, []string{"match", "ip6", "protocol", "6", "0xff"}, netip.Addr.Is6}
)

// direction: packets to the port (the clients' requests) or from it (the
// server's replies).
type direction int

const (
	toPort direction = iota
	fromPort
)

// filter is one `tc filter add dev lo ingress` command's arguments.
type filter []string

// filters returns the u32 filters that send l's packets of the given
// directions and families to dev, at the slot's prefs. A family none of
// whose addresses l names (when it names some) gets no filter.
func (l Link) filters(slot int, dirs []direction, fams []family, dev string) []filter {
	var out []filter
	for _, fam := range fams {
		clients, cok := l.addrsOf(l.Clients, fam)
		servers, sok := l.addrsOf(l.Servers, fam)
		if !cok || !sok {
			continue
		}
		for _, dir := range dirs {
			pref := slotPref(slot, fam, dir)
			port, src, dst := "dport", clients, servers
			if dir == fromPort {
				port, src, dst = "sport", servers, clients
			}
			for _, p := range l.Ports {
				for _, s := range src {
					for _, d := range dst {
						f := filter{"filter", "add", "dev", "lo", "ingress", "pref", strconv.Itoa(pref), "protocol", fam.proto, "u32"}
						f = append(f, fam.fixed...)
						f = append(f, "match", fam.match, port, strconv.Itoa(p), "0xffff")
						f = append(f, fam.addrMatch("src", s)...)
						f = append(f, fam.addrMatch("dst", d)...)
						out = append(out, append(f, "action", "mirred", "egress", "redirect", "dev", dev))
					}
				}
			}
		}
	}
	return out
}

// addrsOf returns the addresses of addrs in fam, with the zero Addr
// standing for "any" when addrs is empty; ok is false when addrs names
// addresses but none of fam.
func (l Link) addrsOf(addrs []netip.Addr, fam family) ([]netip.Addr, bool) {
	if len(addrs) == 0 {
		return []netip.Addr{{}}, true
	}
	var out []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); fam.is(a) {
			out = append(out, a)
		}
	}
	return out, len(out) > 0
}

func (fam family) addrMatch(which string, a netip.Addr) []string {
	if !a.IsValid() {
		return nil
	}
	return []string{"match", fam.match, which, a.String() + "/" + strconv.Itoa(fam.hostBits)}
}
