package outbound

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: a provider's queue is the fleet's, and each process adapting
// its own rate sees its share of it (aimd.Controller.FleetShare). Two
// processes answered 33 and 10 calls a second learn, through the store,
// that theirs are 33 and 10 of the fleet's 43: each adds its calls of
// every fifth clock second to a count there and reads the sum two seconds
// later. With stores of their own each reads its own calls back (a share
// of 1, as if alone); a store that fails the counts tells nothing, nor is
// anything told with SharedRate (the rate is the fleet's already).
func TestEachProcessLearnsItsShareOfTheFleetsCalls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		oneStore     bool
		failing      bool
		shared       bool
		bEvery       int // B answers every bEvery steps of 10 ms
		wantA, wantB float64
	}{
		{"one store", true, false, false, 10, 33.0 / 43, 10.0 / 43},
		{"a store each", false, false, false, 10, 1, 1},
		{"the store fails the counts", true, true, false, 10, 0, 0},
		{"shared rate", true, false, true, 10, 0, 0},
		// B answers 2 or 3 calls a second, under minShareCalls: it
		// neither tells nor reads, and A counts as the whole fleet.
		{"a slow process", true, false, false, 40, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			t0 := time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC) // a second divisible by shareEvery, not near an hour's end
			clk := clocktest.New(t0)
			newClient := func(st store.RateStore, name string) (*Client, *keyState) {
				c, err := New(Config{Clock: clk, Store: st, Instance: name, SharedRate: tc.shared})
				require.NoError(t, err)
				ks := c.keys.acquire("api.share.test", "api.share.test")
				t.Cleanup(func() { c.keys.release(ks) })
				return c, ks
			}
			var stA store.RateStore = memstore.New(memstore.Config{Clock: clk})
			if tc.failing {
				stA = &callsBlind{RateStore: stA}
			}
			stB := stA
			if !tc.oneStore {
				stB = memstore.New(memstore.Config{Clock: clk})
			}
			ca, ka := newClient(stA, "a")
			cb, kb := newClient(stB, "b")
			ctx := context.Background()
			rep := signal.Parse(clk.Now().UnixMicro(), signal.Response{Status: http.StatusOK, Header: http.Header{}})
			// 8 s in steps of 10 ms: A answers a call every third
			// step, B every tenth, in the order they come.
			for i := 1; i <= 800; i++ {
				clk.Set(t0.Add(time.Duration(i) * 10 * time.Millisecond))
				now := clk.Now().UnixMicro()
				if i%3 == 0 {
					ca.observe(ctx, ka, &rep, 5*time.Millisecond, now)
				}
				if i%tc.bEvery == 5 {
					cb.observe(ctx, kb, &rep, 5*time.Millisecond, now)
				}
			}
			// Seconds 0 and 5 each hold 33 of A's calls and 10 of B's
			// (2 or 3 in the slow case).
			require.InDelta(t, tc.wantA, shareOf(ka), 1e-9, "A's share")
			require.InDelta(t, tc.wantB, shareOf(kb), 1e-9, "B's share")
		})
	}
}

func shareOf(ks *keyState) float64 {
	ks.adapt.mu.Lock()
	defer ks.adapt.mu.Unlock()
	return ks.adapt.state.Share()
}

// callsBlind fails every Take of a fleet's count of calls (tellCalls,
// readFleetCalls) and passes the rest on.
type callsBlind struct{ store.RateStore }

func (s *callsBlind) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	if strings.Contains(p.Key, ":calls:") {
		return store.Result{}, errors.New("the store is down")
	}
	return s.RateStore.Take(ctx, p)
}
