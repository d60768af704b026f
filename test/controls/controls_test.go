// Package controls_test runs two `seckill api` processes on one MySQL
// database and one Redis prefix and measures how fast a sale control given
// to one reaches the other: an end (purchases answered 403 SALE_ENDED) and
// an add of units to a sold-out sale (the sold-out flag cleared), and checks
// that a buyer who holds a unit of a sold-out item is answered 409 with the
// order by the instance that did not sell it. TestEarlyPayOverHTTP pays
// and cancels QUEUED orders on one instance.
package controls_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/testkit"
)

const secret = "controls-test-secret-0123456789abcdef"

type instance struct {
	url string
}

// startAPI runs `seckill api` on a free port until the test ends and waits
// until it answers /healthz.
func startAPI(t *testing.T, bin, logPath, name string, env []string) instance {
	t.Helper()
	addr := testkit.FreeAddr(t)
	env = append(append([]string{}, env...), "SECKILL_API_ADDR="+addr, "SECKILL_API_INSTANCE="+name)
	c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{"api"}, Env: env, Log: logPath, Append: true, Banner: name}, 0)
	in := instance{url: "http://" + addr}
	testkit.WaitHTTP(t, in.url+"/healthz", c, time.Minute)
	return in
}

// deployment opens the test's slice of the stack and builds the binary its
// API processes run; ctx ends with the test (2 minutes at most).
func deployment(t *testing.T) (context.Context, *testkit.Slice, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs two API processes on the real services")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx, testkit.NewSlice(ctx, t), testkit.SeckillBinary(t)
}

type answer struct {
	status int
	body   []byte
}

func (a answer) code() string {
	var e struct {
		Error struct {
			Code    string `json:"code"`
			OrderID string `json:"order_id"`
		} `json:"error"`
	}
	_ = json.Unmarshal(a.body, &e)
	return e.Error.Code
}

func call(t *testing.T, method, url string, user int64, role auth.Role, body string) answer {
	t.Helper()
	status, b := testkit.Call(t, method, url, body, []byte(secret), user, role)
	return answer{status: status, body: b}
}

// until calls try until it holds and returns how long that took from since.
func until(t *testing.T, what string, since time.Time, try func() bool) time.Duration {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !try() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(since)
}

func TestControlsReachEveryInstance(t *testing.T) {
	ctx, s, bin := deployment(t)
	newItem := func(units int64) int64 { return s.Sale(ctx, t, "controls", units, 15*time.Minute).ID }
	env := s.Env("SECKILL_JWT_SECRET="+secret, "SECKILL_API_BUYER_RPS=1000", "SECKILL_API_BUYER_BURST=1000")
	logs := filepath.Join(t.TempDir(), "api.log")
	ended, topped := newItem(1000), newItem(1)
	one := startAPI(t, bin, logs, "api-1", env)
	two := startAPI(t, bin, logs, "api-2", env)
	buy := func(in instance, item, user int64) answer {
		return call(t, "POST", fmt.Sprintf("%s/api/v1/seckill/%d", in.url, item), user, auth.RoleBuyer, "")
	}

	// End: given to api-1, measured on api-2 (which has the item cached and
	// on sale) from the moment api-1 answered.
	if a := buy(two, ended, 1); a.status != http.StatusAccepted {
		t.Fatalf("purchase on api-2: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", fmt.Sprintf("%s/api/v1/items/%d/end", one.url, ended), 1, auth.RoleAdmin, ""); a.status != http.StatusOK {
		t.Fatalf("end on api-1: %d %s", a.status, a.body)
	}
	answered := time.Now()
	user := int64(1000)
	took := until(t, "api-2 answers SALE_ENDED", answered, func() bool {
		user++
		a := buy(two, ended, user)
		if a.status == http.StatusAccepted {
			return false // accepted before the end reached it: an order like any other
		}
		return a.status == http.StatusForbidden && a.code() == "SALE_ENDED"
	})
	t.Logf("end given to api-1 reached api-2 in %v (%d purchases accepted meanwhile)", took.Round(time.Millisecond), user-1001)

	// Add to a sold-out sale: given to api-1, api-2's sold-out flag clears.
	a := buy(one, topped, 1)
	if a.status != http.StatusAccepted {
		t.Fatalf("purchase on api-1: %d %s", a.status, a.body)
	}
	var accepted struct {
		OrderID string `json:"order_id"`
	}
	_ = json.Unmarshal(a.body, &accepted)
	until(t, "api-2 holds the item sold out", time.Now(), func() bool {
		user++
		return buy(two, topped, user).status == http.StatusGone
	})
	// The buyer who holds the unit asks api-2, which did not sell it: 409
	// with the order, never 410.
	if a := buy(two, topped, 1); a.status != http.StatusConflict || a.code() != "ALREADY_PURCHASED" ||
		!strings.Contains(string(a.body), accepted.OrderID) {
		t.Fatalf("the holder on api-2: %d %s", a.status, a.body)
	}
	if a := call(t, "POST", fmt.Sprintf("%s/api/v1/items/%d/stock", one.url, topped), 1, auth.RoleAdmin, `{"add":5}`); a.status != http.StatusOK {
		t.Fatalf("add on api-1: %d %s", a.status, a.body)
	}
	answered = time.Now()
	took = until(t, "api-2 sells the added units", answered, func() bool {
		user++
		return buy(two, topped, user).status == http.StatusAccepted
	})
	t.Logf("add given to api-1 cleared api-2's sold-out flag in %v", took.Round(time.Millisecond))

	// Both instances list the items with the same view of the ended sale.
	for _, in := range []instance{one, two} {
		res, err := http.Get(in.url + "/api/v1/items?status=ENDED")
		if err != nil {
			t.Fatal(err)
		}
		var b struct {
			Items []struct {
				ID     int64  `json:"id"`
				Status string `json:"status"`
			} `json:"items"`
		}
		err = json.NewDecoder(res.Body).Decode(&b)
		_ = res.Body.Close()
		if err != nil || len(b.Items) != 1 || b.Items[0].ID != ended {
			t.Fatalf("%s lists ended sales %+v (%v)", in.url, b.Items, err)
		}
	}
}
