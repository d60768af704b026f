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
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/internal/proc"
	"github.com/seckill/seckill/testkit"
)

const secret = "controls-test-secret-0123456789abcdef"

// instance is one API process and the client of its URL.
type instance struct {
	url string
	api *apiclient.ClientWithResponses
}

// startAPI runs `seckill api` on a free port until the test ends and waits
// until it answers /healthz.
func startAPI(t *testing.T, bin, logPath, name string, env []string) instance {
	t.Helper()
	addr := testkit.FreeAddr(t)
	env = append(append([]string{}, env...), "SECKILL_API_ADDR="+addr, "SECKILL_API_INSTANCE="+name)
	c := testkit.Start(t, proc.Spec{Path: bin, Args: []string{"api"}, Env: env, Log: logPath, Append: true, Banner: name}, 0)
	in := instance{url: "http://" + addr}
	in.api = testkit.Client(t, in.url)
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

// as makes a call user's with role (a token signed with the test's secret).
func as(t *testing.T, user int64, role auth.Role) apiclient.RequestEditorFn {
	return testkit.As(t, []byte(secret), user, role)
}

// answered fails the test when a call got no answer.
func answered(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// code is an error answer's code ("" for another answer).
func code(e *apiclient.Error) apiclient.ErrorObjectCode {
	if e == nil {
		return ""
	}
	return e.Error.Code
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
	buy := func(in instance, item, user int64) *apiclient.PurchaseResponse {
		res, err := in.api.PurchaseWithResponse(ctx, item, as(t, user, auth.RoleBuyer))
		answered(t, err)
		return res
	}

	// End: given to api-1, measured on api-2 (which has the item cached and
	// on sale) from the moment api-1 answered.
	if a := buy(two, ended, 1); a.StatusCode() != http.StatusAccepted {
		t.Fatalf("purchase on api-2: %s %s", a.Status(), a.Body)
	}
	end, err := one.api.EndSaleWithResponse(ctx, ended, nil, as(t, 1, auth.RoleAdmin))
	if err := apiclient.Want(end, err, http.StatusOK); err != nil {
		t.Fatalf("end on api-1: %v", err)
	}
	answered := time.Now()
	user := int64(1000)
	took := until(t, "api-2 answers SALE_ENDED", answered, func() bool {
		user++
		a := buy(two, ended, user)
		if a.StatusCode() == http.StatusAccepted {
			return false // accepted before the end reached it: an order like any other
		}
		return code(a.JSON403) == apiclient.ErrorObjectCodeSALEENDED
	})
	t.Logf("end given to api-1 reached api-2 in %v (%d purchases accepted meanwhile)", took.Round(time.Millisecond), user-1001)

	// Add to a sold-out sale: given to api-1, api-2's sold-out flag clears.
	a := buy(one, topped, 1)
	if a.JSON202 == nil {
		t.Fatalf("purchase on api-1: %s %s", a.Status(), a.Body)
	}
	accepted := a.JSON202.OrderID
	until(t, "api-2 holds the item sold out", time.Now(), func() bool {
		user++
		return buy(two, topped, user).StatusCode() == http.StatusGone
	})
	// The buyer who holds the unit asks api-2, which did not sell it: 409
	// with the order, never 410.
	if a := buy(two, topped, 1); code(a.JSON409) != apiclient.ErrorObjectCodeALREADYPURCHASED ||
		a.JSON409.Error.OrderID == nil || *a.JSON409.Error.OrderID != accepted {
		t.Fatalf("the holder on api-2: %s %s", a.Status(), a.Body)
	}
	added, err := one.api.AddStockWithResponse(ctx, topped, nil, apiclient.AddStockJSONRequestBody{Add: 5}, as(t, 1, auth.RoleAdmin))
	if err := apiclient.Want(added, err, http.StatusOK); err != nil {
		t.Fatalf("add on api-1: %v", err)
	}
	answered = time.Now()
	took = until(t, "api-2 sells the added units", answered, func() bool {
		user++
		return buy(two, topped, user).StatusCode() == http.StatusAccepted
	})
	t.Logf("add given to api-1 cleared api-2's sold-out flag in %v", took.Round(time.Millisecond))

	// Both instances list the items with the same view of the ended sale.
	endedOnly := "ENDED"
	for _, in := range []instance{one, two} {
		res, err := in.api.ListItemsWithResponse(ctx, &apiclient.ListItemsParams{Status: &endedOnly})
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			t.Fatal(err)
		}
		if items := res.JSON200.Items; len(items) != 1 || items[0].ID != ended {
			t.Fatalf("%s lists ended sales %+v", in.url, items)
		}
	}
}
