package browser_test

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/testkit"
)

// signIn opens the storefront and signs in as the buyer with the
// development button.
func signIn(p *page, url string, user int64) {
	p.t.Helper()
	p.do("open "+url, chromedp.Navigate(url))
	p.until("the development sign-in", `!document.getElementById("dev-form").hidden`, 15*time.Second)
	p.do("choose the buyer", chromedp.SetValue(chromedp.ID("dev-user"), strconv.FormatInt(user, 10)))
	p.do("sign in", chromedp.Click(chromedp.ID("dev-signin")))
	p.until("signed in", `document.getElementById("signin").hidden`, 15*time.Second)
}

// confirm answers the control room's confirmation dialog with yes.
func confirm(p *page) {
	p.t.Helper()
	p.until("the confirmation dialog", `document.getElementById("confirm").open`, 10*time.Second)
	p.do("confirm", chromedp.Click(chromedp.ID("confirm-yes")))
	p.until("the dialog closed", `!document.getElementById("confirm").open`, 10*time.Second)
}

// figure is the control-room expression of one figure of a sale.
func figure(item int64, key string) string {
	return fmt.Sprintf(`(document.getElementById("s%d-%s")||{}).textContent`, item, key)
}

func TestStorefrontAndControlRoom(t *testing.T) {
	testkit.Integration(t)
	b := newBrowser(t)
	d := deploy(t)

	// ---- 1. A buyer waits for the countdown, buys, pays.
	lamp := d.createSale("Limited edition lamp", 1, 8*time.Second)
	alice := b.page("buyer-1001")
	signIn(alice, d.base+"/", 1001)
	buy := fmt.Sprintf(`document.getElementById("buy-%d")`, lamp.ID)
	alice.until("the sale with its countdown", fmt.Sprintf(`(document.getElementById("sale-%d-clock")||{}).textContent.startsWith("Starts in")`, lamp.ID), 15*time.Second)
	if alice.eval(buy+`.disabled ? "off" : "on"`) != "off" {
		t.Fatal("the buy button is enabled before the sale starts")
	}
	alice.shot("storefront-countdown")
	alice.eval(`String(window.__sameDocument = 1)`) // gone if the page reloads
	alice.until("the buy button enabled once the countdown ends", "!"+buy+".disabled", 30*time.Second)
	alice.do("buy", chromedp.Click(chromedp.ID(fmt.Sprintf("buy-%d", lamp.ID))))
	alice.until("the order page", `location.hash.startsWith("#/orders/")`, 15*time.Second)
	orderID := alice.eval(`location.hash.slice("#/orders/".length)`)
	alice.shot("order-accepted")
	alice.until("PENDING_PAYMENT arriving without a reload",
		`document.getElementById("order-status").dataset.status === "PENDING_PAYMENT" && window.__sameDocument === 1`, 90*time.Second)
	if w := alice.text("order-payby"); !regexp.MustCompile(`^Pay within .+`).MatchString(w) {
		t.Errorf("pay_by countdown: %q", w)
	}
	alice.shot("order-pending-payment")
	alice.do("pay", chromedp.Click(chromedp.ID("order-pay")))
	alice.until("PAID", `document.getElementById("order-status").dataset.status === "PAID"`, 30*time.Second)
	alice.shot("order-paid")

	// ---- 2. A second buyer: sold out, in words, and no Buy button.
	bob := b.page("buyer-1002")
	signIn(bob, d.base+"/", 1002)
	bob.until("no unit left", fmt.Sprintf(`(document.getElementById("sale-%d-units")||{}).textContent.startsWith("0 of 1")`, lamp.ID), 15*time.Second)
	bob.until("sold out in place of the Buy button", soldOut(lamp.ID), 15*time.Second)
	bob.shot("second-buyer-sold-out")

	// The first buyer's orders list the paid order.
	alice.do("open my orders", chromedp.Navigate(d.base+"/#/orders"))
	alice.until("the paid order in my orders", fmt.Sprintf(`document.getElementById("orders").textContent.includes(%s) && document.getElementById("orders").textContent.includes("Paid")`, js(orderID)), 15*time.Second)
	alice.shot("my-orders")

	// ---- 3. The control room during a 200-unit sale.
	// The control room signs in from a link, as make run prints it; the
	// token leaves the address bar at once.
	admin := b.page("admin")
	admin.do("open the control room's link", chromedp.Navigate(d.base+"/admin#token="+d.token(1, auth.RoleAdmin)))
	admin.until("signed in from the link", `document.getElementById("signin").hidden && location.hash === ""`, 15*time.Second)
	// Support finds the first buyer's order: PAID at the door, no provider payment, so no Refund button.
	admin.do("find the paid order", chromedp.SetValue(chromedp.ID("find-q"), orderID), chromedp.Click(chromedp.ID("find-go")))
	admin.until("the order found", fmt.Sprintf(`(document.getElementById("found-%s-status")||{}).textContent === "PAID" && `+
		`document.getElementById("found-%[1]s").textContent.includes("No provider payment") && !document.getElementById("refund-%[1]s")`,
		orderID), 15*time.Second)
	admin.shot("control-room-find")
	admin.do("fill in the new sale",
		chromedp.SetValue(chromedp.ID("c-name"), "Stampede sale"),
		chromedp.SetValue(chromedp.ID("c-units"), "200"),
		chromedp.SetValue(chromedp.ID("c-start"), "3"),
		chromedp.Click(chromedp.ID("c-submit")))
	confirm(admin)
	admin.until("the sale created", `document.getElementById("create-msg").textContent.startsWith("Sale ")`, 15*time.Second)
	m := regexp.MustCompile(`^Sale (\d+) created`).FindStringSubmatch(admin.text("create-msg"))
	if m == nil {
		t.Fatalf("create answer: %q", admin.text("create-msg"))
	}
	sale, _ := strconv.ParseInt(m[1], 10, 64)
	admin.until("the new sale in the control room", figure(sale, "accepted")+` === "0"`, 15*time.Second)
	admin.until("its books: nothing captured, refunded or pending", figure(sale, "captured")+` === "—" && `+
		figure(sale, "refunded")+` === "—" && `+figure(sale, "pending")+` === "—"`, 15*time.Second)

	// Buyers 2001-2200 buy in four waves; after each the control room must
	// show the accepted count and the units left it reached.
	type bought struct {
		order string
		buyer int64
	}
	var orders []bought
	var mu sync.Mutex
	wave := func(from, n int64) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, 25)
		for u := from; u < from+n; u++ {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				res, err := d.api.PurchaseWithResponse(context.Background(), sale, d.as(u, auth.RoleBuyer))
				if err := apiclient.Want(res, err, http.StatusAccepted); err != nil {
					t.Errorf("buyer %d: %v", u, err)
					return
				}
				mu.Lock()
				orders = append(orders, bought{res.JSON202.OrderID, u})
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	// The form's sale starts 3 s after its creation.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if res, err := d.api.GetItemWithResponse(context.Background(), sale); err == nil && res.JSON200 != nil &&
			res.JSON200.Status == apiclient.ItemStatusACTIVE {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sale %d not active 30 s after its creation", sale)
		}
	}
	for w := int64(0); w < 4; w++ {
		wave(2001+50*w, 50)
		n := 50 * (w + 1)
		admin.until(fmt.Sprintf("%d accepted in the control room", n),
			fmt.Sprintf(`%s === "%d" && %s === "%d"`, figure(sale, "accepted"), n, figure(sale, "left"), 200-n), 15*time.Second)
		if w == 1 {
			admin.shot("control-room-half-sold")
			bob.until("the storefront's units left", fmt.Sprintf(`(document.getElementById("sale-%d-units")||{}).textContent.startsWith("100 of 200")`, sale), 15*time.Second)
			toDocs(t, bob.shot("storefront"), "storefront.png")
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	// The sagas make the orders payable at the Temporal server's pace: pay
	// the first ten that are, and watch PAID move.
	isNum := func(key string, atLeast int) string {
		return fmt.Sprintf(`Number(%s) >= %d`, figure(sale, key), atLeast)
	}
	admin.until("orders becoming payable", isNum("PENDING_PAYMENT", 10), 5*time.Minute)
	paid := 0
	for _, o := range orders {
		if paid == 10 {
			break
		}
		buyer := d.as(o.buyer, auth.RoleBuyer)
		if v, err := d.api.GetOrderWithResponse(context.Background(), o.order, buyer); err != nil || v.JSON200 == nil ||
			v.JSON200.Status != apiclient.OrderStatusPENDINGPAYMENT {
			continue
		}
		res, err := d.api.PayOrderWithResponse(context.Background(), o.order, buyer)
		if err := apiclient.Want(res, err, http.StatusOK); err != nil {
			t.Fatalf("pay %s: %v", o.order, err)
		}
		paid++
	}
	if paid < 10 {
		t.Fatalf("only %d orders were payable although the control room counted at least 10", paid)
	}
	admin.until("10 paid in the control room", figure(sale, "PAID")+` === "10"`, 30*time.Second)
	admin.until("the 202 -> first pay latency", figure(sale, "p50")+` !== "—"`, 10*time.Second)
	admin.until("the chart's paid line", chartLine(sale, "paid"), 15*time.Second)
	toDocs(t, admin.shot("control-room"), "control-room.png")

	// ---- 4. Add units to the sold-out lamp: the second buyer gets one.
	admin.do("add one unit to the lamp", chromedp.SetValue(chromedp.ID(fmt.Sprintf("add-%d", lamp.ID)), "1"),
		chromedp.Click(chromedp.ID(fmt.Sprintf("add-%d-go", lamp.ID))))
	confirm(admin)
	admin.until("the unit added", fmt.Sprintf(`document.getElementById("sale-%d-msg").textContent.startsWith("Added 1 units")`, lamp.ID), 15*time.Second)
	bob.until("the added unit on the storefront", fmt.Sprintf(`document.getElementById("sale-%d-units").textContent.startsWith("1 of 2")`, lamp.ID), 15*time.Second)
	bob.do("buy the added unit", chromedp.Click(chromedp.ID(fmt.Sprintf("buy-%d", lamp.ID))))
	bob.until("the second buyer's order page", `location.hash.startsWith("#/orders/")`, 15*time.Second)
	bob.do("back to the sales", chromedp.Navigate(d.base+"/#/"))

	// ---- 5. End now: the buy button of an open page turns off. The
	// stampede sale is sold out (no Buy button): end a sale with units left.
	bob.until("the stampede sale sold out", soldOut(sale), 15*time.Second)
	last := d.createSale("Last call", 5, 0).ID
	buySale := fmt.Sprintf(`document.getElementById("buy-%d")`, last)
	bob.until("the last sale buyable", buySale+" && !"+buySale+".disabled && !"+buySale+".hidden", 15*time.Second)
	admin.until("the last sale in the control room", fmt.Sprintf(`!!document.getElementById("end-%d")`, last), 15*time.Second)
	admin.do("end the sale", chromedp.Click(chromedp.ID(fmt.Sprintf("end-%d", last))))
	confirm(admin)
	ended := time.Now()
	bob.until("the buy button off after the end", buySale+".disabled", 10*time.Second)
	t.Logf("end now -> buy button off on an open page: %s", time.Since(ended).Round(10*time.Millisecond))
	admin.until("the sale shown ended", fmt.Sprintf(`document.getElementById("sale-%d-state").textContent === "ENDED"`, last), 10*time.Second)
	bob.shot("storefront-after-end-now")
	admin.shot("control-room-after-end-now")

	// ---- 6. Readable at 360 px: no sideways scrolling.
	for _, p := range []*page{bob, admin} {
		p.do("narrow the window", chromedp.EmulateViewport(360, 780))
		p.until("the page fitting 360 px", `document.documentElement.scrollWidth <= 360`, 10*time.Second)
		p.shot(p.name + "-360px")
	}
}

// A #token= link while someone is signed in asks before it replaces the
// sign-in (any site can link here: taking the link's token at once let it
// sign its visitors in as its own user, a login CSRF); "stay" keeps the
// current sign-in, "switch" takes the link's. The token leaves the address
// bar either way.
func TestTokenLinkAsksBeforeReplacingTheSignIn(t *testing.T) {
	testkit.Integration(t)
	b := newBrowser(t)
	d := deploy(t)
	p := b.page("token-link")
	signIn(p, d.base+"/", 1001)
	stored := `String((seckill.tokenInfo(localStorage.getItem("seckill.buyer.token")) || {}).user)`
	open := func(user int64) {
		t.Helper()
		// A fresh load, as a link from another site gives (a hash change
		// alone does not reload the page): leave it first.
		p.do("leave the page", chromedp.Navigate(d.base+"/healthz"))
		p.do(fmt.Sprintf("open a link signing in buyer %d", user), chromedp.Navigate(d.base+"/#token="+d.token(user, auth.RoleBuyer)))
		p.until("the question", `document.getElementById("link-signin").open && location.hash === ""`, 15*time.Second)
		if w := p.text("link-signin-text"); !strings.Contains(w, fmt.Sprintf("buyer %d", user)) || !strings.Contains(w, "buyer 1001") {
			t.Fatalf("the question names neither sign-in: %q", w)
		}
	}

	open(1002)
	p.shot("token-link-question")
	if got := p.eval(stored); got != "1001" {
		t.Fatalf("the link's token was stored before the answer: buyer %s", got)
	}
	p.do("stay signed in", chromedp.Click(chromedp.ID("link-signin-no")))
	p.until("the current sign-in kept", `!document.getElementById("link-signin").open && document.getElementById("who").textContent.startsWith("Signed in as buyer 1001 ")`, 15*time.Second)
	if got := p.eval(stored); got != "1001" {
		t.Fatalf("declined, and the stored sign-in is buyer %s", got)
	}

	open(1003)
	p.do("switch", chromedp.Click(chromedp.ID("link-signin-yes")))
	p.until("the link's sign-in taken", `document.getElementById("who").textContent.startsWith("Signed in as buyer 1003 ")`, 15*time.Second)
	if got := p.eval(stored); got != "1003" {
		t.Fatalf("accepted, and the stored sign-in is buyer %s", got)
	}

	// The same sign-in again asks nothing.
	current := p.eval(`localStorage.getItem("seckill.buyer.token")`)
	p.do("leave the page", chromedp.Navigate(d.base+"/healthz"))
	p.do("open a link of the current sign-in", chromedp.Navigate(d.base+"/#token="+current))
	p.until("signed in, no question", `location.hash === "" && document.getElementById("who").textContent.startsWith("Signed in as buyer 1003 ")`, 15*time.Second)
	if p.eval(`String(document.getElementById("link-signin").open)`) != "false" {
		t.Fatal("a link of the current sign-in asked")
	}
}
