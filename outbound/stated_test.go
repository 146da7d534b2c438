package outbound_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: a limit the provider states on its first answer is paced at
// once, from a conservative start of 1/s, with no slow start towards it.
func TestStatedLimitIsPacedFromTheFirstAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		header []string
		body   string
		want   float64
	}{
		{"IETF RateLimit-Policy", []string{"RateLimit-Policy", `"default";q=100;w=1`, "RateLimit", `"default";r=99;t=1`}, "", 100},
		{"X-RateLimit-*", []string{"X-RateLimit-Limit", "600", "X-RateLimit-Remaining", "599", "X-RateLimit-Reset", "60"}, "", 599.0 / 60},
		{"Shopify throttleStatus", []string{"Content-Type", "application/json"},
			`{"data":{},"extensions":{"cost":{"requestedQueryCost":10,"actualQueryCost":5,` +
				`"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":995,"restoreRate":50}}}}`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := clocktest.New(t0)
			base := &scripted{resps: []func() *http.Response{response(200, tc.body, tc.header...)}}
			c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk})})
			require.NoError(t, err)
			before, _ := c.Rate("api.test")
			require.Less(t, before, tc.want)
			resp := get(t, c, "http://api.test/")
			require.NoError(t, resp.Body.Close())
			rate, _ := c.Rate("api.test")
			require.InDelta(t, tc.want, rate, 1e-9, "the stated rate after the first answer")
		})
	}
}
