// Package fleet builds the clients the figures compare, as sim.Contenders:
// Sluice's outbound client with one store shared by every process of a run
// and with a store per process, Scrapy's AutoThrottle, a fixed GCRA pace,
// and no pacing at all. The bench module adds golang.org/x/time/rate.
//
// The contenders time their clients on the run's clock (the scenario's
// Provider.Clock, which sim.RunTable sets), so a table can run on a
// manual clock. Every function here is safe for concurrent use; the
// contenders it returns build fresh state for every run.
package fleet

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Options tune the Sluice contenders. The zero value is outbound's
// defaults.
type Options struct {
	// Outbound is the base configuration of every process's client; Base
	// and Store are set per process.
	Outbound outbound.Config
	// NewStore returns the store a run's processes share (Sluice) or each
	// process's own store (Sluice without shared state; when it returns
	// the same store every time, each process keys its state apart). Nil
	// means a new in-memory store.
	NewStore func() (store.RateStore, error)
}

func (o Options) store(clk clock.Clock) (store.RateStore, error) {
	if o.NewStore != nil {
		return o.NewStore()
	}
	return memstore.New(memstore.Config{Clock: clk}), nil
}

// Sluice is Sluice's outbound client. With shared, every process of a run
// uses one store: they share the key's pauses and, with
// Outbound.SharedRate, one pace at one adapted rate (each process then
// reports its share of it). Without, each process has its own store and
// adapts alone.
func Sluice(name string, shared bool, o Options) sim.Contender {
	return sim.Contender{Name: name, NewRun: func(sc sim.Scenario) (func(int, http.RoundTripper) (sim.Client, error), error) {
		if err := sc.Fill(); err != nil {
			return nil, err
		}
		var st store.RateStore
		var leases store.LeaseStore // the per-call permits (provider.HoldCall), shared too
		if shared {
			s, err := o.store(sc.Provider.Clock)
			if err != nil {
				return nil, err
			}
			st = s
			if k, ok := s.(store.LeaseKeeper); ok {
				leases = k.KeepLeases()
			}
		}
		procs := float64(max(sc.Processes, 1))
		return func(process int, base http.RoundTripper) (sim.Client, error) {
			cfg := o.Outbound
			cfg.Base = base
			cfg.Store = st
			if cfg.Leases == nil {
				cfg.Leases = leases
			}
			if cfg.Clock == nil {
				cfg.Clock = sc.Provider.Clock
			}
			if !shared {
				s, err := o.store(sc.Provider.Clock)
				if err != nil {
					return sim.Client{}, err
				}
				// A store of its own, even when NewStore hands every
				// process the same one.
				cfg.Store = s
				cfg.Prefix = fmt.Sprintf("%sp%d:", cmp.Or(cfg.Prefix, "outbound:"), process)
			}
			c, err := outbound.New(cfg)
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: c, Rate: func() float64 {
				var sum float64
				for _, k := range c.Snapshot(0).Keys {
					sum += k.Rate
				}
				if shared && cfg.SharedRate {
					return sum / procs
				}
				return sum
			}}, nil
		}, nil
	}}
}

// AutoThrottle is Scrapy's AutoThrottle in every process.
func AutoThrottle(name string, cfg sim.AutoThrottleConfig) sim.Contender {
	return sim.Contender{Name: name, NewRun: func(sc sim.Scenario) (func(int, http.RoundTripper) (sim.Client, error), error) {
		cfg := cfg
		if cfg.Clock == nil {
			cfg.Clock = sc.Provider.Clock
		}
		return func(_ int, base http.RoundTripper) (sim.Client, error) {
			a, err := sim.NewAutoThrottle(base, cfg)
			if err != nil {
				return sim.Client{}, err
			}
			return sim.Client{Transport: a, Rate: a.Rate}, nil
		}, nil
	}}
}

// Unpaced sends as fast as the workers go.
func Unpaced(name string) sim.Contender {
	return sim.Contender{Name: name, NewRun: func(sim.Scenario) (func(int, http.RoundTripper) (sim.Client, error), error) {
		return func(_ int, base http.RoundTripper) (sim.Client, error) { return sim.Client{Transport: base}, nil }, nil
	}}
}

// FixedGCRA paces every process at factor times the scenario's starting
// limit divided by the number of processes, with Sluice's GCRA in a store of
// its own: a fixed limiter set by someone who guessed the limit.
func FixedGCRA(name string, factor float64) sim.Contender {
	return sim.Contender{Name: name, NewRun: func(sc sim.Scenario) (func(int, http.RoundTripper) (sim.Client, error), error) {
		if !(factor > 0) {
			return nil, fmt.Errorf("%w: fixed factor must be positive, got %v", sim.ErrInvalidConfig, factor)
		}
		rate := factor * sc.Provider.Limit / float64(max(sc.Processes, 1))
		clk := clock.Or(sc.Provider.Clock)
		return func(_ int, base http.RoundTripper) (sim.Client, error) {
			f := &fixed{base: base, clk: clk, st: memstore.New(memstore.Config{Clock: clk}), rate: rate}
			return sim.Client{Transport: f, Rate: func() float64 { return rate }}, nil
		}, nil
	}}
}

type fixed struct {
	base http.RoundTripper
	clk  clock.Clock
	st   *memstore.Store
	rate float64
}

func (f *fixed) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	lim := store.Limit{Name: "fixed", Rate: 1, Period: time.Duration(float64(time.Second) / f.rate), Burst: 1}
	r, err := f.st.Take(ctx, store.TakeParams{Key: "k", Limit: lim, Cost: 1, MaxDelay: time.Hour})
	if err != nil {
		return nil, err
	}
	if err := sleep(ctx, f.clk, r.Delay); err != nil {
		return nil, err
	}
	return f.base.RoundTrip(req)
}

func sleep(ctx context.Context, clk clock.Clock, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FigureOptions is the configuration the figures run Sluice with (README,
// `sluice sim --report`, bench/cmd/simtable): outbound's defaults, AIMD
// included (outbound.DefaultAIMD: the zero Config a library user or
// `sluice serve` gets), spelled out so that a figure names what it ran.
func FigureOptions() Options {
	var o Options
	o.Outbound.AIMD = outbound.DefaultAIMD()
	return o
}

// SharedRateOptions returns o with the adapted rate in the shared store.
// Each of the 2 processes of the figures sees about half of the calls, so
// the AIMD usage guard is set above twice that (aimd.Config.UsageMultiple).
func SharedRateOptions(o Options) Options {
	o.Outbound.SharedRate = true
	o.Outbound.AIMD.UsageMultiple = 6
	return o
}

// Standard returns the contenders of `sluice sim --report`: Sluice with
// one store for the fleet (pauses shared, each process adapting its share;
// and with SharedRate, one rate for the fleet) and with a store per
// process, AutoThrottle, and a fixed GCRA pace at half and twice the
// limit.
func Standard(o Options) []sim.Contender {
	sr := SharedRateOptions(o)
	return []sim.Contender{
		Sluice("sluice", true, o),
		Sluice("sluice-shared-rate", true, sr),
		Sluice("sluice-local", false, o),
		AutoThrottle("autothrottle", sim.AutoThrottleConfig{}),
		FixedGCRA("fixed-0.5x", 0.5),
		FixedGCRA("fixed-2x", 2),
	}
}
