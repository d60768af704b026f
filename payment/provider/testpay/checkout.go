package testpay

import (
	"errors"
	"html/template"
	"net/http"

	"github.com/seckill/seckill/payment/provider"
)

// Handler serves the hosted checkout: GET /pay/{id} shows the payment and
// its one button, POST /pay/{id} pays it with the test card (Pay) and sends
// the buyer to the request's ReturnURL, or shows that it is paid. The pages
// are public; the JSON API under /v1 (api.go) wants the secret.
func (p *Provider) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/", p.api())
	mux.HandleFunc("GET /pay/{id}", func(w http.ResponseWriter, r *http.Request) {
		pay, err := p.Lookup(r.Context(), r.PathValue("id"))
		p.page(w, pay, err)
	})
	mux.HandleFunc("POST /pay/{id}", func(w http.ResponseWriter, r *http.Request) {
		pay, err := p.Pay(r.Context(), r.PathValue("id"))
		if err == nil {
			p.mu.Lock()
			back := p.returns[pay.ID]
			p.mu.Unlock()
			if back != "" {
				http.Redirect(w, r, back, http.StatusSeeOther)
				return
			}
		}
		p.page(w, pay, err)
	})
	return mux
}

var checkout = template.Must(template.New("checkout").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Test checkout</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: sans-serif; max-width: 30em; margin: 3em auto">
<p>Test payment provider: no real money moves.</p>
{{- if .Missing}}<h1>No such payment</h1>
{{- else if eq .Status "pending"}}<h1>Pay {{.Price}} with a test card</h1>
<p>Order {{.OrderID}}</p>
<form method="post" action="/pay/{{.ID}}"><button type="submit">Pay {{.Price}}</button></form>
{{- else if eq .Status "succeeded"}}<h1>Paid {{.Price}}</h1><p>Order {{.OrderID}}: you can close this page.</p>
{{- else}}<h1>This payment is closed</h1><p>Order {{.OrderID}}: its time to pay ran out, or it was canceled.</p>
{{- end}}
</body></html>
`))

func (p *Provider) page(w http.ResponseWriter, pay provider.Payment, err error) {
	status := http.StatusOK
	switch {
	case errors.Is(err, provider.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, ErrClosed):
		status = http.StatusConflict
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = checkout.Execute(w, struct {
		provider.Payment
		Missing bool
		Price   string
	}{pay, status == http.StatusNotFound, FormatAmount(pay.Amount, pay.Currency)})
}

// FormatAmount writes minor units as a price: 999 EUR is "9.99 EUR", 500
// JPY "500 JPY" (provider.FormatAmount).
func FormatAmount(amount int64, currency string) string {
	return provider.FormatAmount(amount, currency)
}
