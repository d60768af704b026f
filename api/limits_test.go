package api

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/time/rate"
)

func TestKeyedLimitersEvictIdleAndStayBounded(t *testing.T) {
	k := newKeyedLimiters[int64](1, 2, time.Minute, 64*4)
	now := time.Now()
	for id := int64(1); id <= 1000; id++ {
		if ok, _ := k.allow(id, now); !ok {
			t.Fatalf("first request of buyer %d refused", id)
		}
	}
	if n := k.size(); n > 64*4 {
		t.Fatalf("%d limiters held, bound is %d", n, 64*4)
	}
	// Burst 2 then refused with a retry hint of about a second.
	k.allow(5000, now)
	k.allow(5000, now)
	ok, retry := k.allow(5000, now)
	if ok || retry < time.Second || retry > 2*time.Second {
		t.Fatalf("third request: ok=%v retry=%v", ok, retry)
	}
	left := func() (n int) {
		for i := range k.shards {
			n += len(k.shards[i].m)
		}
		return n
	}
	if k.sweep(now.Add(30 * time.Second)); left() == 0 {
		t.Fatal("sweep evicted limiters that were not idle long enough")
	}
	if k.sweep(now.Add(2 * time.Minute)); left() != 0 {
		t.Fatalf("%d idle limiters survived the sweep", left())
	}
}

// A key's bucket answers as rate.Limiter's AllowN would, retry hints too.
func TestKeyedLimitersMatchRateLimiter(t *testing.T) {
	k := newKeyedLimiters[int64](5, 10, time.Hour, 64)
	ref := rate.NewLimiter(5, 10)
	now := k.epoch
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		now = now.Add(time.Duration(rnd.Int64N(int64(400 * time.Millisecond))))
		ok, retry := k.allow(7, now)
		if want := ref.AllowN(now, 1); ok != want || (!ok && retry != retryAfter(ref, now)) {
			t.Fatalf("call %d: allow %v (retry %v), rate.Limiter %v (retry %v)", i, ok, retry, want, retryAfter(ref, now))
		}
	}
}

// IPv6 clients are keyed by their /64: rotating addresses inside it gives no
// fresh bucket; IPv4 addresses stay as they are.
func TestIPKeyGroupsIPv6By64(t *testing.T) {
	a, b := ipKey("2001:db8:1:2:aaaa::1"), ipKey("2001:db8:1:2:ffff:1:2:3")
	if a != b || a != "2001:db8:1:2::/64" {
		t.Fatalf("keys %q and %q, want one /64", a, b)
	}
	if ipKey("2001:db8:1:3::1") == a {
		t.Fatal("another /64 shares the key")
	}
	if ipKey("203.0.113.7") != "203.0.113.7" || ipKey("::ffff:203.0.113.7") != "::ffff:203.0.113.7" || ipKey("junk") != "junk" {
		t.Fatal("IPv4 or unparsable addresses changed")
	}
}

// The per-IP limiters stay within their cap whatever the addresses.
func TestIPLimitersBounded(t *testing.T) {
	k := newKeyedLimiters[string](1, 1, time.Hour, 1024)
	now := time.Now()
	for i := range 100_000 {
		k.allow(ipKey(fmt.Sprintf("2001:db8:%x:%x::1", i>>16, i&0xffff)), now)
	}
	if n := k.size(); n > 1024 {
		t.Fatalf("%d limiters kept, cap 1024", n)
	}
}

// size returns how many limiters are held.
func (k *keyedLimiters[K]) size() int {
	n := 0
	for i := range k.shards {
		k.shards[i].mu.Lock()
		n += len(k.shards[i].m)
		k.shards[i].mu.Unlock()
	}
	return n
}
