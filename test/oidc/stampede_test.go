// Package oidc_test runs a stampede on a `seckill api` process whose buyers
// are signed in by a test OpenID Connect provider that rotates its signing
// key in the middle of the sale.
package oidc_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/auth/oidctest"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/testkit"
)

const (
	secret   = "oidc-test-shared-secret-0123456789abcdef"
	audience = "seckill-stampede"
)

// TestStampedeThroughAKeyRotation: 900 buyers (a fifth sending their request
// two or three times at once) race for 300 units. Their tokens come from the
// provider's RS256 key until a sixth of the answers are in; then the
// provider publishes an ES256 key and signs with it at once (no lead time),
// and later withdraws the old key. Every request is answered by its sale's
// outcome (202, 409, 410; no 401), each unit goes to one buyer, and the
// rotation costs the provider one JWKS fetch.
func TestStampedeThroughAKeyRotation(t *testing.T) {
	if testing.Short() {
		t.Skip("runs `seckill api` on the real services")
	}
	const (
		buyers = 900
		units  = 300
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s := testkit.NewSlice(ctx, t)
	bin := testkit.SeckillBinary(t)
	iss := oidctest.New(t)
	old, next := iss.Key(jose.RS256), iss.Key(jose.ES256)
	iss.Publish(old)

	addr := testkit.FreeAddr(t)
	env := s.Env("SECKILL_API_ADDR="+addr, "SECKILL_JWT_SECRET="+secret,
		"SECKILL_AUTH_OIDC_ISSUER="+iss.URL, "SECKILL_AUTH_OIDC_AUDIENCE="+audience, "SECKILL_AUTH_OIDC_BUYER_CLAIM=buyer_id",
		"SECKILL_API_BUYER_RPS=1000", "SECKILL_API_BUYER_BURST=1000", "SECKILL_API_IP_RPS=100000", "SECKILL_API_IP_BURST=100000")
	c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{"api"}, Env: env, Log: filepath.Join(t.TempDir(), "api.log"), Banner: "api"}, 5*time.Second)
	base := "http://" + addr
	testkit.WaitHTTP(t, base+"/readyz", c, time.Minute) // the provider's keys among its checks
	item := s.Sale(ctx, t, "oidc stampede", units, 15*time.Minute).ID
	path := fmt.Sprintf("%s/api/v1/seckill/%d", base, item)

	// Tokens of both keys are signed before the sale: the provider's
	// signing is not what is measured.
	oldToks, nextToks := make([]string, buyers), make([]string, buyers)
	for i := range buyers {
		oldToks[i] = iss.Sign(old, iss.Claims(int64(10_000+i), audience))
		nextToks[i] = iss.Sign(next, iss.Claims(int64(10_000+i), audience))
	}
	fetchesBefore := iss.Fetches()

	tr := &http.Transport{MaxIdleConnsPerHost: 64, MaxConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	buy := func(tok string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return res.StatusCode, nil
	}

	var (
		rotated, withdrawn atomic.Bool
		answered           atomic.Int64
		mu                 sync.Mutex
		byStatus           = map[string]int{}
		won                = map[int]int{}
	)
	answer := func(i int, key, tok string) {
		status, err := buy(tok)
		if err != nil {
			t.Errorf("buyer %d: %v", i, err)
			return
		}
		mu.Lock()
		byStatus[fmt.Sprintf("%d/%s key", status, key)]++
		if status == http.StatusAccepted {
			won[i]++
		}
		mu.Unlock()
		switch status {
		case http.StatusAccepted, http.StatusConflict, http.StatusGone:
		default:
			t.Errorf("buyer %d (%s key): status %d", i, key, status)
		}
		switch n := answered.Add(1); {
		case n == buyers/6:
			iss.Publish(next)
			rotated.Store(true)
		case n == buyers/2:
			iss.Withdraw(old)
			withdrawn.Store(true)
		}
	}
	// 64 buyers at a time, each choosing its token as its turn comes: the
	// sale runs on through the rotation. A fifth fire two or three at once.
	turns := make(chan int, buyers)
	for i := range buyers {
		turns <- i
	}
	close(turns)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for i := range turns {
				key, tok := "old", oldToks[i]
				if rotated.Load() {
					key, tok = "new", nextToks[i]
				}
				repeats := 1
				if i%5 == 0 {
					repeats = 2 + i%2
				}
				var same sync.WaitGroup
				for range repeats {
					same.Go(func() { answer(i, key, tok) })
				}
				same.Wait()
			}
		})
	}
	wg.Wait()
	t.Logf("answers by status and signing key: %v; JWKS fetches during the sale: %d", byStatus, iss.Fetches()-fetchesBefore)

	if !withdrawn.Load() || byStatus["202/new key"]+byStatus["409/new key"]+byStatus["410/new key"] == 0 {
		t.Fatalf("the rotation did not happen mid-sale: %v", byStatus)
	}
	if len(won) != units {
		t.Errorf("%d buyers won a unit, want %d", len(won), units)
	}
	for i, n := range won {
		if n != 1 {
			t.Errorf("buyer %d won %d units", i, n)
		}
	}
	if left, err := s.Stock.Left(ctx, item); err != nil || left != 0 {
		t.Errorf("Redis stock ends at %d (%v), want 0", left, err)
	}
	if n := s.Redis.HLen(ctx, s.Stock.ItemKeys(item).Buyers).Val(); n != units {
		t.Errorf("%d buyer marks in Redis, want %d", n, units)
	}
	if n := iss.Fetches() - fetchesBefore; n != 1 {
		t.Errorf("the rotation cost the provider %d JWKS fetches, want 1", n)
	}

	// Beside the provider, the shared secret's HS256 tokens are taken; a
	// key the provider never published is not.
	hs := testkit.Token(t, []byte(secret), 10_001, auth.RoleBuyer)
	if st, err := buy(hs); err != nil || st != http.StatusAccepted && st != http.StatusConflict && st != http.StatusGone {
		t.Errorf("an HS256 buyer: %d, %v", st, err)
	}
	stranger := iss.Key(jose.RS256)
	if st, err := buy(iss.Sign(stranger, iss.Claims(99_999, audience))); err != nil || st != http.StatusUnauthorized {
		t.Errorf("a token of an unpublished key: %d, %v; want 401", st, err)
	}
}
