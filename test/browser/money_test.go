package browser_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seckill/seckill/apiclient"
	"github.com/seckill/seckill/auth"
	"github.com/seckill/seckill/payment/provider"
	"github.com/seckill/seckill/testkit"
	"github.com/seckill/seckill/web"
)

// loadCommon puts the pages' shared script (the bytes the API serves) in a
// blank tab as window.S: the price parser and money, without a server.
func loadCommon(t *testing.T, p *page) {
	t.Helper()
	src, err := fs.ReadFile(web.Files(), "assets/common.js")
	if err != nil {
		t.Fatal(err)
	}
	p.do("open a blank page", chromedp.Navigate("about:blank"))
	if got := p.eval(`(() => {` + string(src) + `; window.S = seckill; return typeof S.parsePrice; })()`); got != "function" {
		t.Fatalf("common.js: parsePrice is %q", got)
	}
}

// The control room's price parser (seckill.parsePrice, in the page): a
// price as a person writes it, in the currency's minor units exactly, and
// every refusal in words. Runs in Chromium, no services.
func TestPriceParser(t *testing.T) {
	b := newBrowser(t)
	p := b.page("price-parser")
	loadCommon(t, p)
	type parsed struct {
		OK       bool   `json:"ok"`
		Minor    int64  `json:"minor"`
		Currency string `json:"currency"`
		Text     string `json:"text"`
		Error    string `json:"error"`
	}
	parse := func(in, fallback string) parsed {
		t.Helper()
		var out parsed
		if err := json.Unmarshal([]byte(p.eval(fmt.Sprintf(`JSON.stringify(S.parsePrice(%s, %s))`, js(in), js(fallback)))), &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, c := range []struct {
		in, fallback string
		minor        int64
		currency     string
	}{
		{"9.99", "", 999, "EUR"},
		{"9,99", "", 999, "EUR"},
		{"9.99 EUR", "", 999, "EUR"},
		{"EUR 9.99", "", 999, "EUR"},
		{"eur 9,99", "", 999, "EUR"},
		{"9.99EUR", "", 999, "EUR"},
		{"€9.99", "", 999, "EUR"},
		{"9,99 €", "", 999, "EUR"},
		{"£ 12.50", "", 1250, "GBP"},
		{"1 234,50", "", 123450, "EUR"},
		{"1,234.50", "", 123450, "EUR"},
		{"1.234,50", "", 123450, "EUR"},
		{"1'234.50 CHF", "", 123450, "CHF"},
		{"12 345 678,90", "", 1234567890, "EUR"},
		{"1.234.567", "", 123456700, "EUR"},
		{"\u00a01\u202f234,50\u00a0EUR ", "", 123450, "EUR"},
		{".99", "", 99, "EUR"},
		{"0", "", 0, "EUR"},
		{"9.9", "", 990, "EUR"},
		{"9.9900", "", 999, "EUR"},
		{"0.1 EUR", "", 10, "EUR"}, // 0.1 as a float is not 0.1: the digits are read as digits
		{"0.29", "", 29, "EUR"},    // 0.29 * 100 is 28.999999999999996 in a float
		{"1000 JPY", "", 1000, "JPY"},
		{"1,000 JPY", "", 1000, "JPY"},
		{"500", "JPY", 500, "JPY"},
		{"9.999 KWD", "", 9999, "KWD"},
		{"1.5 KWD", "", 1500, "KWD"},
		{"1,234.567 BHD", "", 1234567, "BHD"},
		{"9.99", "USD", 999, "USD"},
		{"9.99 GBP", "EUR", 999, "GBP"},
		{"90071992547409.91", "", 9007199254740991, "EUR"},
	} {
		got := parse(c.in, c.fallback)
		if !got.OK || got.Minor != c.minor || got.Currency != c.currency || got.Text != provider.FormatAmount(c.minor, c.currency) {
			t.Errorf("parsePrice(%q, %q) = %+v, want %d %s (%q)", c.in, c.fallback, got, c.minor, c.currency, provider.FormatAmount(c.minor, c.currency))
		}
	}
	for _, c := range []struct{ in, fallback, says string }{
		{"", "", "Write a price"},
		{"   ", "", "Write a price"},
		{"-9.99", "", "cannot be negative"},
		{"EUR -9.99", "", "cannot be negative"},
		{"9.999", "", "ambiguous"},
		{"9.999 EUR", "", "EUR has 2 decimals"},
		{"1,2345", "", "EUR has 2 decimals"},
		{"9.991 EUR", "", "ambiguous"},
		{"1.5 JPY", "", "JPY has no decimals"},
		{"9.9999 KWD", "", "KWD has 3 decimals"},
		{"9.99 XYZ", "", "XYZ is not a currency this form knows"},
		{"$9.99", "", "code"},
		{"9.99 ¥", "", "code"},
		{"abc", "", "not a price"},
		{"EUR", "", "not a price"},
		{"1e3", "", "not a price"},
		{"9.99.99", "", "grouped by three"},
		{"1,23,456", "", "grouped by three"},
		{"1 234.567,89", "", "one thousands separator"},
		{"9. 99", "", "digits only"},
		{"99999999999999999999", "", "too large"},
		{"90071992547409.92", "", "too large"},
	} {
		got := parse(c.in, c.fallback)
		if got.OK || !strings.Contains(got.Error, c.says) {
			t.Errorf("parsePrice(%q, %q) = %+v, want a refusal saying %q", c.in, c.fallback, got, c.says)
		}
	}
	// The pages write money as the checkout pages do: one exponent table.
	var codes []string
	if err := json.Unmarshal([]byte(p.eval(`JSON.stringify([...S.currencies, "BIF", "CLP", "XOF", "IQD", "LYD", "XXX"])`)), &codes); err != nil {
		t.Fatal(err)
	}
	for _, cur := range codes {
		for _, n := range []int64{0, 5, 999, 123456, -150} {
			if got, want := p.eval(fmt.Sprintf(`S.money(%d, %s)`, n, js(cur))), provider.FormatAmount(n, cur); got != want {
				t.Errorf("S.money(%d, %s) = %q, provider.FormatAmount %q", n, cur, got, want)
			}
		}
	}
}

// soldOut is the storefront's expression of a sale shown sold out: the words
// in place, no Buy button to be seen.
func soldOut(sale int64) string {
	return fmt.Sprintf(`(() => { const b = document.getElementById("buy-%d"), s = document.getElementById("sale-%[1]d-soldout");
		return !!s && !s.hidden && s.offsetParent !== null && s.textContent === "Sold out" && (!b || (b.hidden && b.offsetParent === null)); })()`, sale)
}

// The control room takes a price as a person writes it: a bad one is
// refused in the page, "9.99 EUR" makes a sale whose price_cents is 999. Its
// only unit bought, the storefront shows "Sold out" and no Buy button; the
// buyer who bought it still finds the order from the sale.
func TestPriceAsWrittenAndSoldOut(t *testing.T) {
	testkit.Integration(t)
	b := newBrowser(t)
	d := deploy(t)
	admin := b.page("price-admin")
	admin.do("open the control room's link", chromedp.Navigate(d.base+"/admin#token="+d.token(1, auth.RoleAdmin)))
	admin.until("signed in", `document.getElementById("signin").hidden`, 15*time.Second)

	// ---- 1. A price the page cannot read is refused there, in words.
	admin.do("write an ambiguous price", chromedp.SetValue(chromedp.ID("c-name"), "Price as written"),
		chromedp.SetValue(chromedp.ID("c-units"), "1"), chromedp.SetValue(chromedp.ID("c-start"), "0"),
		chromedp.SetValue(chromedp.ID("c-price"), "9.999 EUR"), chromedp.Click(chromedp.ID("c-submit")))
	admin.until("the refusal", `document.getElementById("create-msg").textContent.startsWith("Not created: the price cannot be read") && `+
		`document.getElementById("c-price-msg").textContent.includes("ambiguous") && document.getElementById("c-price").getAttribute("aria-invalid") === "true"`, 10*time.Second)
	if admin.eval(`String(document.getElementById("confirm").open)`) != "false" {
		t.Fatal("a refused price asked for confirmation")
	}
	admin.shot("control-room-price-refused")

	// ---- 2. "9.99 EUR": shown as read, confirmed, created at 999 minor units.
	admin.do("write 9.99 EUR", chromedp.SetValue(chromedp.ID("c-price"), "9"), chromedp.SendKeys(chromedp.ID("c-price"), ".99 EUR"))
	admin.until("the price as read", `document.getElementById("c-price-says").textContent === "9.99 EUR (999 in minor units)" && `+
		`document.getElementById("c-currency").value === "EUR" && document.getElementById("c-price-msg").textContent === ""`, 10*time.Second)
	admin.do("create", chromedp.Click(chromedp.ID("c-submit")))
	admin.until("the confirmation naming the price", `document.getElementById("confirm").open && document.getElementById("confirm-text").textContent.includes("1 units at 9.99 EUR")`, 10*time.Second)
	admin.shot("control-room-price-confirm")
	confirm(admin)
	admin.until("the sale created", `document.getElementById("create-msg").textContent.startsWith("Sale ")`, 15*time.Second)
	m := regexp.MustCompile(`^Sale (\d+) created: "Price as written", 1 units at 9\.99 EUR\.$`).FindStringSubmatch(admin.text("create-msg"))
	if m == nil {
		t.Fatalf("create answer: %q", admin.text("create-msg"))
	}
	sale, _ := strconv.ParseInt(m[1], 10, 64)
	res, err := d.api.GetItemWithResponse(context.Background(), sale)
	if err := apiclient.Want(res, err, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	if res.JSON200.PriceCents != 999 || res.JSON200.Currency != "EUR" {
		t.Fatalf("sale %d: price_cents %d %s, want 999 EUR", sale, res.JSON200.PriceCents, res.JSON200.Currency)
	}
	admin.shot("control-room-price-created")

	// ---- 3. Its one unit bought: sold out, no Buy button; the buyer keeps the way to the order.
	alice := b.page("sold-out-buyer-1001")
	signIn(alice, d.base+"/", 1001)
	buy := fmt.Sprintf("buy-%d", sale)
	alice.until("the sale open at 9.99 EUR", fmt.Sprintf(`!document.getElementById(%q).disabled && document.getElementById("sale-%d").textContent.includes("9.99 EUR")`, buy, sale), 30*time.Second)
	alice.do("buy", chromedp.Click(chromedp.ID(buy)))
	alice.until("the order page", `location.hash.startsWith("#/orders/")`, 15*time.Second)
	orderID := alice.eval(`location.hash.slice("#/orders/".length)`)

	bob := b.page("sold-out-buyer-1002")
	signIn(bob, d.base+"/", 1002)
	bob.until("sold out, no Buy button", soldOut(sale)+fmt.Sprintf(` && document.getElementById("sale-%d-units").textContent.startsWith("0 of 1")`, sale), 15*time.Second)
	if bob.eval(fmt.Sprintf(`String(document.getElementById("sale-%d-mine").hidden)`, sale)) != "true" {
		t.Fatal("a buyer without an order sees a link to one")
	}
	bob.shot("storefront-sold-out")

	alice.do("back to the sales", chromedp.Navigate(d.base+"/#/"))
	alice.until("sold out, and the buyer's own order linked", soldOut(sale)+fmt.Sprintf(` && (() => { const a = document.getElementById("sale-%d-mine");
		return !a.hidden && a.getAttribute("href") === %s && a.textContent.startsWith("Your order"); })()`, sale, js("#/orders/"+orderID)), 15*time.Second)
	alice.shot("storefront-sold-out-own-order")
	alice.do("follow the link", chromedp.Click(chromedp.ID(fmt.Sprintf("sale-%d-mine", sale))))
	alice.until("the order page again", fmt.Sprintf(`location.hash === %s`, js("#/orders/"+orderID)), 10*time.Second)
}

// stripeRefund refunds amount of the payment at the Stripe stand-in through
// Stripe's API, as a refund made by hand in Stripe's dashboard would: the
// shop never asked for it.
func stripeRefund(t *testing.T, d *deployment, paymentID string, amount int64) {
	t.Helper()
	call := func(method, path string, form url.Values) map[string]any {
		t.Helper()
		req, err := http.NewRequest(method, d.payURL+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+standinKey)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = res.Body.Close() }()
		body, _ := io.ReadAll(res.Body)
		var out map[string]any
		if res.StatusCode != http.StatusOK || json.Unmarshal(body, &out) != nil {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, body)
		}
		return out
	}
	intent := paymentID
	if strings.HasPrefix(paymentID, "cs_") {
		pi, _ := call("GET", "/v1/checkout/sessions/"+paymentID, nil)["payment_intent"].(string)
		if pi == "" {
			t.Fatalf("checkout session %s names no PaymentIntent", paymentID)
		}
		intent = pi
	}
	call("POST", "/v1/refunds", url.Values{"payment_intent": {intent}, "amount": {strconv.FormatInt(amount, 10)}})
}

// The control room's "Check against the provider", on the Stripe path (the
// stand-in, as make run runs it): a sale paid through Stripe Checkout shows
// our figures and the provider's side by side, equal, one payment read, no
// problem; after 5.00 EUR refunded by hand at Stripe, the provider's figure
// differs and the problem names the order.
func TestBooksAgainstTheProvider(t *testing.T) {
	testkit.Integration(t)
	b := newBrowser(t)
	d := deployWith(t, "stripe")
	lamp := d.createSale("Books lamp", 2, 2*time.Second)
	alice := b.page("books-buyer-1001")
	orderID := buyAndCheckOut(d, alice, lamp.ID, 1001)
	alice.until("PAID", status+` === "PAID"`, 60*time.Second)

	admin := b.page("books-admin")
	admin.do("open the control room", chromedp.Navigate(d.base+"/admin#token="+d.token(1, auth.RoleAdmin)))
	check := fmt.Sprintf("books-%d", lamp.ID)
	admin.until("the check's button", fmt.Sprintf(`(() => { const b = document.getElementById(%q); return !!b && !b.hidden && b.offsetParent !== null; })()`, check), 30*time.Second)
	cell := func(key, side string) string {
		return fmt.Sprintf(`(document.getElementById("s%d-books-EUR-%s-%s")||{}).textContent`, lamp.ID, key, side)
	}
	admin.do("check against the provider", chromedp.Click(chromedp.ID(check)))
	admin.until("both figures, equal", fmt.Sprintf(`%s === "19.99 EUR" && %s === "19.99 EUR" && %s === "0.00 EUR" && %s === "0.00 EUR"`,
		cell("captured", "ours"), cell("captured", "provider"), cell("refunded", "ours"), cell("refunded", "provider"))+
		fmt.Sprintf(` && document.getElementById("s%d-books-read").textContent.startsWith("1 of 1 payment read at Stripe")`+
			` && document.getElementById("s%[1]d-books-problems").textContent.startsWith("No problem")`, lamp.ID), 30*time.Second)
	admin.shot("control-room-books-agree")

	// A refund of 5.00 EUR made by hand at Stripe.
	found, err := d.api.AdminFindOrdersWithResponse(context.Background(), &apiclient.AdminFindOrdersParams{OrderID: &orderID}, d.as(1, auth.RoleAdmin))
	if err := apiclient.Want(found, err, http.StatusOK); err != nil {
		t.Fatal(err)
	}
	if len(found.JSON200.Orders) != 1 || len(found.JSON200.Orders[0].Payments) != 1 {
		t.Fatalf("order %s: %+v", orderID, found.JSON200.Orders)
	}
	stripeRefund(t, d, found.JSON200.Orders[0].Payments[0].ProviderPaymentID, 500)
	// A check within 10 s is the last one's reading: the next one reads again.
	time.Sleep(11 * time.Second)
	admin.do("check again", chromedp.Click(chromedp.ID(check)))
	admin.until("the provider's refund beside ours, and the problem naming the order",
		fmt.Sprintf(`%s === "0.00 EUR" && %s === "5.00 EUR" && document.getElementById("s%d-books-EUR-refunded-provider").classList.contains("differs")`,
			cell("refunded", "ours"), cell("refunded", "provider"), lamp.ID)+
			fmt.Sprintf(` && (() => { const p = document.getElementById("s%d-books-problems"); return p.tagName === "UL" && p.textContent.includes("provider_differs") && p.textContent.includes(%s); })()`,
				lamp.ID, js(orderID)), 30*time.Second)
	admin.shot("control-room-books-differ")
}
