package browser_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/testkit"
)

// status is the order page's expression of the order's status.
const status = `document.getElementById("order-status").dataset.status`

// chartLine is the control-room expression of a sale's chart having a line
// of the kind (accepted, paid, refunded) above zero somewhere.
func chartLine(sale int64, kind string) string {
	return fmt.Sprintf(`(() => { const l = document.querySelector("#s%d-chart polyline.line.%s");
		return !!l && Number(l.dataset.points) > 0 && l.getAttribute("points").split(" ").some(p => Number(p.split(",")[1]) < 80); })()`, sale, kind)
}

// buyAndCheckOut buys one unit of the sale on the storefront as user, presses
// Pay, and pays with the test card on the provider's checkout page (Stripe
// Checkout's as the stand-in serves it, or the test provider's), which
// sends the buyer back to the order page; it returns the order id.
func buyAndCheckOut(d *deployment, p *page, sale, user int64) string {
	p.t.Helper()
	signIn(p, d.base+"/", user)
	p.until("the price with its currency", fmt.Sprintf(`(document.getElementById("sale-%d")||{textContent:""}).textContent.includes("19.99 EUR")`, sale), 15*time.Second)
	buy := fmt.Sprintf("buy-%d", sale)
	p.until("the sale open", fmt.Sprintf(`!document.getElementById(%q).disabled`, buy), 30*time.Second)
	p.do("buy", chromedp.Click(chromedp.ID(buy)))
	p.until("the order page", `location.hash.startsWith("#/orders/")`, 15*time.Second)
	orderID := p.eval(`location.hash.slice("#/orders/".length)`)
	p.until("Pay enabled", `!document.getElementById("order-pay").disabled`, 30*time.Second)
	p.do("pay", chromedp.Click(chromedp.ID("order-pay")))
	p.across("the provider's checkout page", fmt.Sprintf(`location.href.startsWith(%s) && document.body.textContent.includes("Pay 19.99 EUR with a test card") && document.body.textContent.includes(%s)`,
		js(d.payURL+"/pay/"), js(orderID)), 30*time.Second)
	p.shot(p.name + "-checkout-page")
	p.do("pay with the test card", chromedp.Click(chromedp.CSS(`form button[type="submit"]`)))
	p.across("back on the order page", fmt.Sprintf(`location.href === %s && !!document.getElementById("order-status")`, js(d.base+"/#/orders/"+orderID)), 30*time.Second)
	return orderID
}

// The storefront's Pay goes through Stripe Checkout's code path and back,
// against the Stripe stand-in, as make run runs it (the checkout's story
// below).
func TestPayThroughStripeCheckout(t *testing.T) {
	testkit.Integration(t)
	payThroughTheCheckout(t, "stripe")
}

// The same through the test provider, `seckill testpay`.
func TestPayThroughTheCheckout(t *testing.T) {
	testkit.Integration(t)
	payThroughTheCheckout(t, "testpay")
}

// payThroughTheCheckout: the storefront's Pay goes through the provider's
// checkout and back: the order page shows PAID when the provider's
// notification lands. A buyer who pays and then cancels before the
// notification lands (held back by the provider's Delay knob) sees the
// saga's refund in words. The control room draws the sale: accepted, paid
// and refunded lines. Screenshots are named after the provider.
func payThroughTheCheckout(t *testing.T, provider string) {
	b := newBrowser(t)
	d := deployWith(t, provider)
	lamp := d.createSale("Desk lamp", 2, 2*time.Second)

	// ---- 1. Pay through the checkout: PAID when the notification lands.
	alice := b.page(provider + "-buyer-1001")
	paid := buyAndCheckOut(d, alice, lamp.ID, 1001)
	alice.until("PAID", status+` === "PAID"`, 60*time.Second)
	alice.shot(provider + "-order-paid-through-the-checkout")

	// ---- 2. Paid, then cancelled before the notification lands: the saga
	// finds the payment succeeded when it cancels it, and refunds it.
	if err := d.setKnobs(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	bob := b.page(provider + "-buyer-1002")
	refunded := buyAndCheckOut(d, bob, lamp.ID, 1002)
	bob.until("the order still open (the notification held back)", `!document.getElementById("order-cancel").disabled`, 30*time.Second)
	bob.do("cancel", chromedp.Click(chromedp.ID("order-cancel")))
	bob.until("REFUNDED, in words", status+` === "REFUNDED" && /^Refunded 19\.99 EUR( on [^,]+)?, refund id \S+: you cancelled it/.test(document.getElementById("order-words").textContent)`, 90*time.Second)
	bob.shot(provider + "-order-refunded")
	if paid == refunded {
		t.Fatal("one order for two buyers")
	}

	// ---- 3. The control room's chart of the sale.
	admin := b.page(provider + "-admin")
	admin.do("open the control room", chromedp.Navigate(d.base+"/admin#token="+d.token(1, auth.RoleAdmin)))
	for _, line := range []string{"accepted", "paid", "refunded"} {
		admin.until("the chart's "+line+" line", chartLine(lamp.ID, line), 30*time.Second)
	}
	if w := admin.text(fmt.Sprintf("s%d-chart-cap", lamp.ID)); !strings.Contains(w, "2 accepted, 1 paid, 1 refunded") {
		t.Errorf("the chart's caption: %q", w)
	}
	admin.shot(provider + "-control-room-chart")
}
