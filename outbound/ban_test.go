package outbound_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: a ban is the fleet's. When one process is banned (418 with a
// Retry-After), another that finds the key paused starts over as the
// banned one does (a quarter of its rate, aimd's restart), rather than cut
// its rate once as for a refusal and come back, when the ban ends, at
// nearly the rate the provider banned the fleet for. A refusal with the
// same pause is only a refusal to the other process: one cut. So is a ban
// whose mark the store cannot read: B still waits the pause out and its
// call succeeds, with the one cut of a refusal.
func TestBanHeardFromTheFleetStartsOver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		status  int
		blind   bool    // the store fails every read of the ban's mark
		atLeast float64 // B's rate after, as a share of its rate before
		atMost  float64
	}{
		{"banned", http.StatusTeapot, false, 0.2, 0.25 + 1e-9}, // a quarter, then cut once for the pause (Decrease 0.9)
		{"refused", http.StatusTooManyRequests, false, 0.5, 0.95},
		{"banned, mark unreadable", http.StatusTeapot, true, 0.5, 0.95},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clk := watch(t0)
			var st store.RateStore = memstore.New(memstore.Config{Clock: clk})
			blind := &banBlind{RateStore: st}
			if tc.blind {
				st = blind
			}
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
			if tc.blind {
				require.Positive(t, blind.failed.Load(), "B read the ban's mark")
			}
		})
	}
}

// banBlind is a store that fails every Take of a key's ban mark (the
// names outbound gives it end in ":ban"), and counts the failures.
type banBlind struct {
	store.RateStore
	failed atomic.Int64
}

func (s *banBlind) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if strings.HasSuffix(p.Key, ":ban") {
		s.failed.Add(1)
		return store.Result{}, errors.New("store unreachable")
	}
	return s.RateStore.Take(ctx, p)
}
