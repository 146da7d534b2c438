package job

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

// CapacityGate returns a store.Gate (Config.Gate) that checks a
// connector's limiter policies before a claim without charging them: a
// peek (cost 0) at each rate policy under the connector's id, the key
// Run.Call charges. A policy with less than one unit left makes the gate
// answer how long until it has one (the window's end, or the GCRA
// emission of one unit); the longest such wait wins. Shadow and
// concurrency policies never hold a claim back. policies returns a
// connector's policy names; ConnectorPolicies reads them from the store.
func CapacityGate(lim *limiter.Limiter, policies func(ctx context.Context, connectorID string) ([]string, error)) store.Gate {
	return func(ctx context.Context, id string) (time.Duration, error) {
		names, err := policies(ctx, id)
		if err != nil {
			return 0, err
		}
		var wait time.Duration
		for _, name := range names {
			h, err := lim.Handle(name)
			if err != nil {
				return 0, fmt.Errorf("job: connector %q: %w", id, err)
			}
			pol := h.Policy()
			if pol.Shadow || pol.Algorithm == store.Concurrency {
				continue
			}
			d, err := h.AllowN(ctx, id, 0)
			if err != nil {
				return 0, fmt.Errorf("job: connector %q: policy %q: %w", id, name, err)
			}
			if d.Remaining >= 1 {
				continue
			}
			w := d.ResetAfter
			if pol.Algorithm == store.GCRA && pol.Rate > 0 {
				// ResetAfter is until the whole burst is back; one unit
				// is back burst-1 emission intervals earlier.
				burst := pol.Burst
				if burst == 0 {
					burst = pol.Rate
				}
				t := pol.Period / time.Duration(pol.Rate)
				w -= time.Duration(burst-1) * t
			}
			wait = max(wait, w, time.Microsecond)
		}
		return wait, nil
	}
}

// ConnectorPolicies returns a policies function for CapacityGate that
// reads each connector's policies from st and keeps them for ttl (on clk;
// nil means the real clock), so that a claim's gate costs no store read
// most of the time.
func ConnectorPolicies(st store.JobStore, ttl time.Duration, clk clock.Clock) func(ctx context.Context, connectorID string) ([]string, error) {
	clk = clock.Or(clk)
	type entry struct {
		policies []string
		at       time.Time
	}
	var mu sync.Mutex
	cache := map[string]entry{}
	return func(ctx context.Context, id string) ([]string, error) {
		now := clk.Now()
		mu.Lock()
		e, ok := cache[id]
		mu.Unlock()
		if ok && now.Sub(e.at) < ttl {
			return e.policies, nil
		}
		c, err := st.GetConnector(ctx, id)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		cache[id] = entry{policies: c.Policies, at: now}
		mu.Unlock()
		return c.Policies, nil
	}
}

// KnownPolicies wraps a policies function for CapacityGate so that it
// drops the names lim does not hold: a connector that names a policy the
// limiter lacks is then gated by the others (or claimed ungated, and its
// Run.Call fails naming the policy), instead of failing every claim of the
// worker or server that asks the gate (a connector's configuration is not
// a store outage).
func KnownPolicies(lim *limiter.Limiter, policies func(ctx context.Context, connectorID string) ([]string, error)) func(ctx context.Context, connectorID string) ([]string, error) {
	return func(ctx context.Context, id string) ([]string, error) {
		names, err := policies(ctx, id)
		if err != nil {
			return nil, err
		}
		known := make([]string, 0, len(names))
		for _, n := range names {
			if _, err := lim.Handle(n); err == nil {
				known = append(known, n)
			}
		}
		return known, nil
	}
}
