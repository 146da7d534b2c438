package outbound_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: a ban is the fleet's. When one process is banned (418 with a
// Retry-After), another that finds the key paused starts over as the
// banned one does (a quarter of its rate, aimd's restart), rather than cut
// its rate once as for a refusal and come back, when the ban ends, at
// nearly the rate the provider banned the fleet for. A refusal with the
// same pause is only a refusal to the other process: one cut.
func TestBanHeardFromTheFleetStartsOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		atLeast float64 // B's rate after, as a share of its rate before
		atMost  float64
	}{
		{"banned", http.StatusTeapot, 0.2, 0.25 + 1e-9}, // a quarter, then cut once for the pause (Decrease 0.9)
		{"refused", http.StatusTooManyRequests, 0.5, 0.95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := watch(t0)
			st := memstore.New(memstore.Config{Clock: clk})
			a := &scripted{resps: []func() *http.Response{
				response(200, "ok"), response(tc.status, "", "Retry-After", "30"),
			}}
			b := &scripted{resps: []func() *http.Response{response(200, "ok")}}
			ca, cb := fleetOf(t, st, clk, a, b)
			for _, c := range []http.RoundTripper{cb, ca, ca} {
				resp := get(t, c, "http://api.ban.test/v1/x")
				require.NoError(t, resp.Body.Close())
				clk.Advance(10 * time.Millisecond)
			}
			before, _ := cb.Rate("api.ban.test")
			getAdvancing(t, clk, cb, "http://api.ban.test/v1/x")
			after, _ := cb.Rate("api.ban.test")
			require.GreaterOrEqual(t, clk.Now().Sub(t0), 30*time.Second, "B waited for the pause")
			require.GreaterOrEqual(t, after, tc.atLeast*before, "B: %v -> %v", before, after)
			require.LessOrEqual(t, after, tc.atMost*before, "B: %v -> %v", before, after)
		})
	}
}
