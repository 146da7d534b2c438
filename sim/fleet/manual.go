package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/sim"
)

// Issue18Scenarios returns issue 18's scenarios for runs of d: every
// dialect of package sim, 16 workers in 2 processes, a hidden limit of
// 100/s halving to 50/s at d/2, 20 ms of service latency; and the ban
// dialect once more as "ban-on-refusals", a provider that bans after 5
// refusals in 10 s whatever the client did (ProviderConfig.BanOnRefusals).
func Issue18Scenarios(d time.Duration) []sim.Scenario {
	return issue18(d, 100, 50)
}

// Issue18RiseScenarios returns the same scenarios with the limit rising
// instead: 50/s doubling to 100/s at d/2 (issue 18 item 4, re-convergence
// up).
func Issue18RiseScenarios(d time.Duration) []sim.Scenario {
	return issue18(d, 50, 100)
}

func issue18(d time.Duration, from, to float64) []sim.Scenario {
	var out []sim.Scenario
	for _, dl := range sim.Dialects() {
		sc := sim.Scenario{
			Name: dl.String(),
			Provider: sim.ProviderConfig{Dialect: dl, Limit: from, Latency: 20 * time.Millisecond,
				Changes: []sim.Change{{At: d / 2, Limit: to}}},
			Workers: 16, Processes: 2, Duration: d,
		}
		out = append(out, sc)
		if dl == sim.Ban {
			sc.Name, sc.Provider.BanOnRefusals = "ban-on-refusals", true
			out = append(out, sc)
		}
	}
	return out
}

// ManualStall is how long RunManual waits, in real time, for a run's
// goroutines to settle before it gives up on a step of the manual clock.
const ManualStall = 3 * time.Minute

// RunManual runs c through sc on a manual clock (virtual time) and returns
// the run's result. The clock moves on by a millisecond only once every
// goroutine of the run waits on it: the run's pending timers are then the
// harness's two (the run's end and the per-second sampler), one per worker
// (each waits on its client's pacing or on the provider's service time)
// and extra more (the client's own: outbound's idle sweep, one per
// process, for Sluice; 0 for FixedGCRA). So the provider sees every
// request at the time its client sent it, however slow or loaded the
// machine, and the outcome depends on the clients' logic alone. It fails
// when more timers are pending than that (extra is wrong) or when a step
// does not settle within ManualStall.
func RunManual(ctx context.Context, sc sim.Scenario, c sim.Contender, extra int) (*sim.Result, error) {
	if err := sc.Fill(); err != nil {
		return nil, err
	}
	clk := clocktest.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	type result struct {
		rows []sim.Row
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		rows, err := sim.RunTable(ctx, []sim.Scenario{sc}, []sim.Contender{c}, clk)
		done <- result{rows, err}
	}()
	want := sc.Workers + 2 + extra
	deadline := time.Now().Add(ManualStall)
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return nil, r.err
			}
			if len(r.rows) != 1 {
				return nil, fmt.Errorf("fleet: %s / %s: %d rows, want 1", sc.Name, c.Name, len(r.rows))
			}
			return r.rows[0].Result, nil
		default:
		}
		if n := clk.Timers(); n >= want {
			if n > want {
				cancel()
				<-done
				return nil, fmt.Errorf("fleet: %s / %s: %d timers pending, more than the run's %d goroutines", sc.Name, c.Name, n, want)
			}
			clk.Advance(time.Millisecond)
			deadline = time.Now().Add(ManualStall)
			continue
		}
		if time.Now().After(deadline) {
			cancel()
			return nil, fmt.Errorf("fleet: %s / %s: no step at %v on the manual clock for %v (%d of %d timers pending)",
				sc.Name, c.Name, clk.Now(), ManualStall, clk.Timers(), want)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		time.Sleep(50 * time.Microsecond)
	}
}
