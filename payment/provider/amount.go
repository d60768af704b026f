package provider

import "fmt"

// zeroDecimal are the currencies whose minor unit is the unit (ISO 4217
// exponent 0, as Stripe lists them).
var zeroDecimal = map[string]bool{"BIF": true, "CLP": true, "DJF": true, "GNF": true, "JPY": true, "KMF": true,
	"KRW": true, "MGA": true, "PYG": true, "RWF": true, "UGX": true, "VND": true, "VUV": true, "XAF": true,
	"XOF": true, "XPF": true}

// FormatAmount writes minor units as a price: 999 EUR is "9.99 EUR", 500
// JPY "500 JPY" (the checkout pages' words; the storefront writes them the
// same).
func FormatAmount(amount int64, currency string) string {
	if zeroDecimal[currency] {
		return fmt.Sprintf("%d %s", amount, currency)
	}
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, amount/100, amount%100, currency)
}
