package provider

import "fmt"

// zeroDecimal are the currencies whose minor unit is the unit (ISO 4217
// exponent 0, as Stripe lists them).
var zeroDecimal = map[string]bool{"BIF": true, "CLP": true, "DJF": true, "GNF": true, "JPY": true, "KMF": true,
	"KRW": true, "MGA": true, "PYG": true, "RWF": true, "UGX": true, "VND": true, "VUV": true, "XAF": true,
	"XOF": true, "XPF": true}

// threeDecimal are the currencies with three decimals (ISO 4217 exponent 3).
// The pages' money (web/static/assets/common.js) holds the same two lists.
var threeDecimal = map[string]bool{"BHD": true, "IQD": true, "JOD": true, "KWD": true, "LYD": true, "OMR": true, "TND": true}

// FormatAmount writes minor units as a price: 999 EUR is "9.99 EUR", 500
// JPY "500 JPY", 9999 KWD "9.999 KWD" (the checkout pages' words; the
// storefront writes them the same).
func FormatAmount(amount int64, currency string) string {
	if zeroDecimal[currency] {
		return fmt.Sprintf("%d %s", amount, currency)
	}
	sign := ""
	if amount < 0 {
		sign, amount = "-", -amount
	}
	if threeDecimal[currency] {
		return fmt.Sprintf("%s%d.%03d %s", sign, amount/1000, amount%1000, currency)
	}
	return fmt.Sprintf("%s%d.%02d %s", sign, amount/100, amount%100, currency)
}
