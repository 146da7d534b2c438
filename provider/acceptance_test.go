package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestAcceptanceShopifyUnderLoad is seed 004's acceptance checklist on real
// Redis: 8 workers in 2 processes run 320 GraphQL jobs against two
// simulated shops (spelt several ways). Under load no shop exceeds its
// limits: the simulated Shopify never has to answer THROTTLED, because no
// query is sent that its bucket cannot hold. No retry storm: every job
// succeeds (throttled work is delayed, not failed), and a query above the
// maximum cost is refused before it is sent and never retried.
func TestAcceptanceShopifyUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	stores := redisStores(t, 2)
	shop, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-graphql", Capacity: 1000, Rate: 4000})
	require.NoError(t, err)
	s, err := Embedded()
	require.NoError(t, err)
	p, _ := s.Get("shopify-graphql")
	var transports []*Transport
	var attempts, throttledSeen atomic.Int64
	for _, st := range stores {
		rt, err := NewRuntime(Config{Profile: p, Store: st})
		require.NoError(t, err)
		transports = append(transports, &Transport{
			Runtime: rt,
			Base:    sim.HandlerTransport{Handler: shop},
			Cost: func(r *http.Request) int64 {
				n, _ := strconv.ParseInt(r.Header.Get("X-Sim-Query-Cost"), 10, 64)
				return n
			},
			OnSettle: func(_ *http.Request, _ *Ticket, o Outcome) {
				attempts.Add(1)
				if o.Kind == Throttled {
					throttledSeen.Add(1)
				}
			},
		})
	}
	hosts := []string{"Shop-A.myshopify.com", "shop-a.myshopify.com", "SHOP-B.MYSHOPIFY.COM", "shop-b.myshopify.com"}
	const workers, jobs = 8, 40
	var failed, ok atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			c := &http.Client{Transport: transports[w%2]}
			for j := range jobs {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+hosts[(w+j)%len(hosts)]+"/admin/api/2026-01/graphql.json", http.NoBody)
				req.Header.Set("X-Sim-Query-Cost", fmt.Sprint(100+10*(j%5)))
				req.Header.Set("X-Sim-Actual-Cost", fmt.Sprint(20+5*(j%7)))
				resp, err := c.Do(req)
				if err != nil {
					failed.Add(1)
					t.Errorf("job %d/%d: %v", w, j, err)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if sim.Classify(resp.StatusCode, body) != sim.OutcomeOK {
					failed.Add(1)
					t.Errorf("job %d/%d: %d %s", w, j, resp.StatusCode, body)
					continue
				}
				ok.Add(1)
			}
		})
	}
	wg.Wait()
	st := shop.Stats()
	require.Equal(t, int64(workers*jobs), ok.Load(), "every job succeeded")
	require.Zero(t, failed.Load())
	require.Zero(t, st.Throttled, "no shop was asked for more than its bucket held")
	require.Zero(t, throttledSeen.Load())
	require.Equal(t, int64(workers*jobs), st.Admitted)
	require.Equal(t, attempts.Load(), st.Requests, "one attempt per job: no retries")

	// MAX_COST_EXCEEDED: refused before sending, never retried.
	before := shop.Stats().Requests
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://shop-a.myshopify.com/admin/api/2026-01/graphql.json", http.NoBody)
	req.Header.Set("X-Sim-Query-Cost", "1500")
	_, err = (&http.Client{Transport: transports[0]}).Do(req)
	require.ErrorIs(t, err, ErrCostExceedsLimit)
	require.Equal(t, before, shop.Stats().Requests, "never sent")
}

// TestAcceptanceThrottledIsDelayed: when the shop's budget is spent by
// someone the fleet cannot see (another app), the simulated Shopify answers
// THROTTLED; the work is delayed by what the response says and then
// succeeds: no job fails. The provider, the store and the runtime share a
// manual clock, moved on only while every worker waits, so the fleet's
// first queries find the bucket empty on every run.
func TestAcceptanceThrottledIsDelayed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clocktest.New(t0)
	shop, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "shopify-graphql", Capacity: 1000, Rate: 50, Clock: clk})
	require.NoError(t, err)
	s, _ := Embedded()
	p, _ := s.Get("shopify-graphql")
	rt, err := NewRuntime(Config{Profile: p, Store: memstore.New(memstore.Config{Clock: clk}), Clock: clk})
	require.NoError(t, err)
	var throttles, sent atomic.Int64
	tr := &Transport{Runtime: rt, Base: sim.HandlerTransport{Handler: shop},
		Cost: func(*http.Request) int64 { return 100 },
		OnSettle: func(_ *http.Request, _ *Ticket, o Outcome) {
			sent.Add(1)
			if o.Kind == Throttled {
				throttles.Add(1)
			}
		}}
	// Another app empties the shop's bucket behind the fleet's back.
	other := sim.HandlerTransport{Handler: shop}
	for range 10 {
		req, _ := http.NewRequest(http.MethodPost, "https://s.myshopify.com/graphql.json", http.NoBody)
		req.Header.Set("X-Sim-Query-Cost", "100")
		req.Header.Set("X-Sim-Actual-Cost", "100")
		resp, err := other.RoundTrip(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
	}
	const workers, jobs = 4, 10
	var wg sync.WaitGroup
	var failed, finished atomic.Int64
	for range workers {
		wg.Go(func() {
			defer finished.Add(1)
			for range jobs {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "https://s.myshopify.com/graphql.json", http.NoBody)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if sim.Classify(resp.StatusCode, body) != sim.OutcomeOK {
					failed.Add(1)
				}
			}
		})
	}
	// Move time on when every unfinished worker waits on a timer.
	for finished.Load() < workers && ctx.Err() == nil {
		if clk.Timers() >= int(workers-finished.Load()) {
			clk.Advance(100 * time.Millisecond)
			continue
		}
		time.Sleep(time.Millisecond) // poll: the workers run on their own
	}
	wg.Wait()
	require.NoError(t, ctx.Err())
	require.Zero(t, failed.Load(), "throttled work is delayed, not failed")
	require.Positive(t, throttles.Load(), "the fleet met the empty bucket")
	require.Equal(t, int64(workers*jobs), sent.Load()-throttles.Load(), "every job ran once; only throttled attempts were repeated")
	require.Equal(t, shop.Stats().Admitted, int64(10+workers*jobs))
}

// TestAcceptanceGitHubAgainstItsDialect: one token's mixed work (GETs,
// POSTs, searches and GraphQL queries) under the github profile against
// the simulated GitHub (written from GitHub's documentation: primary
// limits per resource, secondary points in a rolling minute): the
// provider refuses nothing and bans nothing, because nothing is sent that
// a limit cannot hold. The store, the runtime and the provider share a
// manual clock, moved on by what the profile says to wait.
func TestAcceptanceGitHubAgainstItsDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := clocktest.New(t0)
	gh, err := sim.NewProfileProvider(sim.ProfileConfig{Profile: "github", Clock: clk})
	require.NoError(t, err)
	s, err := Embedded()
	require.NoError(t, err)
	p, _ := s.Get("github")
	rt, err := NewRuntime(Config{Profile: p, Store: memstore.New(memstore.Config{Clock: clk}), Now: clk.Now})
	require.NoError(t, err)
	waited := time.Duration(0)
	for i := range 600 {
		method, path, cost := http.MethodGet, "/repos/o/r", int64(0)
		switch {
		case i%50 == 0:
			path = "/search/code"
		case i%7 == 0:
			method, path, cost = http.MethodPost, "/graphql", 10
		case i%2 == 0:
			method, path = http.MethodPost, "/repos/o/r/issues"
		}
		for attempt := 0; ; attempt++ {
			require.Less(t, attempt, 1000, "call %d never went", i)
			tk, err := rt.Reserve(ctx, Call{Key: "Token-A", Method: method, Path: path, Cost: cost})
			require.NoError(t, err)
			if !tk.OK {
				d := max(tk.Delay, time.Millisecond)
				clk.Advance(d)
				waited += d
				continue
			}
			req := httptest.NewRequest(method, "https://api.github.com"+path, http.NoBody)
			req.Header.Set("Authorization", "token a")
			req.Header.Set("X-Sim-Query-Cost", fmt.Sprint(cost))
			rec := httptest.NewRecorder()
			gh.ServeHTTP(rec, req)
			o, err := rt.Settle(ctx, tk, signal.Response{Status: rec.Code, Header: rec.Header(), Body: rec.Body.Bytes()})
			require.NoError(t, err)
			require.Equal(t, OK, o.Kind, "call %d (%s %s): %d %s", i, method, path, rec.Code, rec.Body)
			break
		}
	}
	st := gh.Stats()
	require.Zero(t, st.Throttled, "nothing sent that a limit could not hold")
	require.Zero(t, st.Banned)
	require.EqualValues(t, 600, st.Admitted)
	require.Positive(t, waited, "the secondary points and search's minute held calls back")
}
