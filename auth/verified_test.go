package auth

import (
	"fmt"
	"testing"
	"time"
)

func TestVerifiedRemembersUntilExpiryOrMaxAge(t *testing.T) {
	c := newVerified(time.Minute, 100, verifiedShards)
	now := time.Unix(1_800_000_000, 0)
	p := Principal{UserID: 7, Role: RoleBuyer}
	if _, _, ok := c.get("tok", now); ok {
		t.Fatal("a token never verified was found")
	}
	_, k, _ := c.get("tok", now)
	c.put(k, p, now, now.Add(time.Hour))
	if got, _, ok := c.get("tok", now.Add(59*time.Second)); !ok || got != p {
		t.Fatalf("within max age: %+v, %v", got, ok)
	}
	if _, _, ok := c.get("tok", now.Add(time.Minute)); ok {
		t.Fatal("found at max age: a withdrawn key's token would outlive the refresh")
	}
	if _, _, ok := c.get("tok2", now); ok {
		t.Fatal("another token's bytes found the entry")
	}
	_, k, _ = c.get("short", now)
	c.put(k, p, now, now.Add(10*time.Second))
	if _, _, ok := c.get("short", now.Add(10*time.Second)); ok {
		t.Fatal("found once the token expired")
	}
}

// remembered counts c's entries over its shards.
func remembered(c *verified) int {
	n := 0
	for i := range c.shards {
		n += len(c.shards[i].cur) + len(c.shards[i].prev)
	}
	return n
}

func TestVerifiedIsBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	sharded := newVerified(time.Hour, 6400, verifiedShards)
	for i := range 100_000 {
		_, k, _ := sharded.get(fmt.Sprint(i), now)
		sharded.put(k, Principal{UserID: int64(i + 1)}, now, now.Add(time.Hour))
	}
	if n := remembered(sharded); n > 6400 {
		t.Fatalf("%d entries in %d shards after 100,000 puts, bound 6400", n, verifiedShards)
	}
	// One shard: the generations in their order.
	c := newVerified(time.Hour, 100, 1)
	for i := range 1000 {
		_, k, _ := c.get(fmt.Sprint(i), now)
		c.put(k, Principal{UserID: int64(i + 1)}, now, now.Add(time.Hour))
		if n := remembered(c); n > 100 {
			t.Fatalf("%d entries after %d puts, bound 100", n, i+1)
		}
	}
	// The last 50 are in the current generation, the 50 before in the
	// previous one: a hit there moves to the current one and survives the
	// next roll.
	if p, _, ok := c.get("900", now); !ok || p.UserID != 901 {
		t.Fatalf("a previous generation's token: %+v, %v", p, ok)
	}
	if _, _, ok := c.get("0", now); ok {
		t.Fatal("the oldest token is still remembered")
	}
}
