package api_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/seckill/seckill/api"
	"github.com/seckill/seckill/config"
)

// SECKILL_API_TRUSTED_PROXIES="a, b" trusts b too: the client address of a
// request from b comes from X-Forwarded-For (b used to be dropped silently,
// and the peer address counted).
func TestUnitTrustedProxiesFromEnv(t *testing.T) {
	loaded, err := config.LoadFrom(map[string]string{"SECKILL_API_TRUSTED_PROXIES": "10.0.0.0/8, 127.0.0.1/32, ::1/128"})
	if err != nil {
		t.Fatal(err)
	}
	h := newUnitHarness(t, func(c *config.API, _ *api.Deps, _ *api.Options) {
		c.IPRPS, c.IPBurst, c.TrustedProxies = 0.01, 1, loaded.API.TrustedProxies
	})
	item := h.onSale(1)
	get := func(xff string) response {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/api/v1/items/%d", h.ts.URL, item), nil)
		req.Header.Set("X-Forwarded-For", xff)
		res, err := h.ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return response{status: res.StatusCode, header: res.Header, body: body}
	}
	expect(t, get("198.51.100.1"), http.StatusOK, "")
	expect(t, get("198.51.100.2"), http.StatusOK, "") // another client behind the proxy: its own bucket
	expect(t, get("198.51.100.1"), http.StatusTooManyRequests, "RATE_LIMITED")
}
