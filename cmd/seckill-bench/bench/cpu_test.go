package bench

import (
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/seckill/seckill/config"
)

// The meter reads this process's own CPU, sums a name's processes, and
// charges it per answer.
func TestCPUMeterReadsProc(t *testing.T) {
	self := os.Getpid()
	m := StartCPU(map[string][]int{"one": {self}, "twice": {self, self}})
	x := 0
	for i := range 200_000_000 { // burn ~0.2 s of CPU: 20 clock ticks
		x += i % 7
	}
	_ = x
	per := m.PerAnswer(1000)
	if per["one"] <= 0 || per["total"] != per["one"]+per["twice"] {
		t.Fatalf("per answer %v, want a positive figure for one, and the total the sum", per)
	}
	if per["twice"] < 1.5*per["one"] {
		t.Fatalf("a name of two processes (here the same one twice) is not summed: %v", per)
	}
}

// Services are found by the ports of their configured addresses: here this
// process's own listener stands in for a Redis node and a broker.
func TestStackPIDsFindsListeners(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(port)
	if got := listenerPIDs()[n]; got != os.Getpid() {
		t.Fatalf("port %d: pid %d, want this process (%d)", n, got, os.Getpid())
	}
	var cfg config.Config
	cfg.Redis.Addrs = []string{addr, addr}
	cfg.RocketMQ.Brokers = []string{addr}
	pids := StackPIDs(cfg)
	for _, name := range []string{"redis", "broker", "load generator"} {
		if len(pids[name]) != 1 || pids[name][0] != os.Getpid() {
			t.Fatalf("%s: %v, want [%d] (one process listed once)", name, pids[name], os.Getpid())
		}
	}
}
