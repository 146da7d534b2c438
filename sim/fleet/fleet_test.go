package fleet_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/sim/fleet"
)

// scenario is the short scenario every contender runs: 2 processes of 2
// workers against a bare-429 provider at 20/s (burst 2) for 2 s.
func scenario() sim.Scenario {
	return sim.Scenario{Provider: sim.ProviderConfig{Dialect: sim.Bare429, Limit: 20, Latency: 2 * time.Millisecond},
		Workers: 4, Processes: 2, Duration: 2 * time.Second}
}

// lastResult is the last result runManual returned (TestFigures, which
// is not parallel, prints its seconds); parallel tests write it too, so
// under lastMu.
var (
	lastMu     sync.Mutex
	lastResult *sim.Result
)

// runManual runs c through sc on a manual clock (fleet.RunManual) and
// returns its summary.
func runManual(t *testing.T, sc sim.Scenario, c sim.Contender, extra int) sim.Summary {
	t.Helper()
	res, err := fleet.RunManual(t.Context(), sc, c, extra)
	require.NoError(t, err)
	lastMu.Lock()
	lastResult = res
	lastMu.Unlock()
	return sim.Summarize(res)
}

// On the run's clock the fixed paces hold their rate: at half the limit
// never throttled, at twice the limit throttled; unpaced sends far more.
// The manual clock makes this exact: the provider sees each request when
// its client sent it.
func TestFixedPaces(t *testing.T) {
	t.Parallel()
	sc := scenario()
	half := runManual(t, sc, fleet.FixedGCRA("fixed-0.5x", 0.5), 0)
	// Each process at 5/s from the start: at 0, 200 ms, ..., 1.8 s (the
	// sends at 2 s end after the run and are not counted).
	require.EqualValues(t, 2*10, half.Offered)
	require.Zero(t, half.Throttles)
	double := runManual(t, sc, fleet.FixedGCRA("fixed-2x", 2), 0)
	require.EqualValues(t, 2*40, double.Offered)
	require.Positive(t, double.Throttles)
	unpaced := runManual(t, sc, fleet.Unpaced("unpaced"), 0)
	require.Greater(t, unpaced.Offered, double.Offered)
	require.Greater(t, unpaced.Throttles, double.Throttles)
}

// Sluice starts conservatively: far fewer attempts than unpaced. On the
// manual clock, with outbound's idle sweep (one timer per process).
func TestSluiceStartsConservatively(t *testing.T) {
	t.Parallel()
	sc := scenario()
	s := runManual(t, sc, fleet.Sluice("sluice", true, fleet.FigureOptions()), sc.Processes)
	unpaced := runManual(t, sc, fleet.Unpaced("unpaced"), 0)
	require.Positive(t, s.Offered)
	require.Less(t, s.Offered, unpaced.Offered/4)
}

// Every contender runs a short scenario on the real clock. Only what holds
// however slow the machine is asserted: a fixed pace never sends above
// its rate (the provider's view of it depends on scheduling, see
// TestFixedPaces).
func TestContenders(t *testing.T) {
	t.Parallel()
	contenders := append(fleet.Standard(fleet.FigureOptions()), fleet.Unpaced("unpaced"))
	rows, err := sim.RunTable(t.Context(), []sim.Scenario{scenario()}, contenders, nil)
	require.NoError(t, err)
	got := map[string]sim.Summary{}
	for _, r := range rows {
		got[r.Contender] = r.Summary
	}
	require.Len(t, got, 7)
	// At most 5/s per process for 2 s, one more at each start.
	require.LessOrEqual(t, got["fixed-0.5x"].Offered, int64(2*11))
	require.LessOrEqual(t, got["fixed-2x"].Offered, int64(2*41))
}

func TestFixedRejectsBadFactor(t *testing.T) {
	t.Parallel()
	_, err := fleet.FixedGCRA("bad", 0).NewRun(sim.Scenario{})
	require.ErrorIs(t, err, sim.ErrInvalidConfig)
}

func TestIssue18Scenarios(t *testing.T) {
	t.Parallel()
	scs := fleet.Issue18Scenarios(time.Minute)
	require.Len(t, scs, len(sim.Dialects())+1)
	names := map[string]bool{}
	for _, sc := range scs {
		require.NoError(t, sc.Fill())
		names[sc.Name] = true
		require.Equal(t, 100.0, sc.Provider.Limit)
		require.Equal(t, []sim.Change{{At: 30 * time.Second, Limit: 50}}, sc.Provider.Changes)
		require.Equal(t, 16, sc.Workers)
		require.Equal(t, 2, sc.Processes)
		require.Equal(t, sc.Name == "ban-on-refusals", sc.Provider.BanOnRefusals)
	}
	require.True(t, names["ban-on-refusals"])
	require.True(t, names["ietf"])
}

func TestIssue18RiseScenarios(t *testing.T) {
	t.Parallel()
	down := fleet.Issue18Scenarios(time.Minute)
	up := fleet.Issue18RiseScenarios(time.Minute)
	require.Len(t, up, len(down))
	for i, sc := range up {
		require.NoError(t, sc.Fill())
		require.Equal(t, down[i].Name, sc.Name)
		require.Equal(t, 50.0, sc.Provider.Limit)
		require.Equal(t, []sim.Change{{At: 30 * time.Second, Limit: 100}}, sc.Provider.Changes)
		require.Equal(t, 16, sc.Workers)
		require.Equal(t, 2, sc.Processes)
		require.Equal(t, sc.Name == "ban-on-refusals", sc.Provider.BanOnRefusals)
	}
}

// RunManual counts the run's goroutines by their timers: told too few of
// the client's own (Sluice's idle sweep, one per process), it fails rather
// than step the clock while a goroutine is still running.
func TestRunManualCountsTimers(t *testing.T) {
	t.Parallel()
	sc := scenario()
	_, err := fleet.RunManual(t.Context(), sc, fleet.Sluice("sluice", true, fleet.FigureOptions()), 0)
	require.ErrorContains(t, err, "timers pending")
}

// Issue 18: Shopify's REST leaky bucket (sim dialect shopify-rest) reports
// its level on every answer but never its leak, and a call that finds it
// full pauses the fleet 2 s (Retry-After: 2.0). Sluice paces by the level:
// served at the leak, with no refusal, and back within seconds when the
// leak halves or doubles. (With the aimd rate alone it served 0.87 of the
// limit halving and 0.69 rising, never re-converging.) Virtual time: the
// figures depend on the clients' logic alone.
func TestSluicePacesShopifyRESTByItsLevel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		scs  []sim.Scenario
	}{
		{"halving", fleet.Issue18Scenarios(30 * time.Second)},
		{"rising", fleet.Issue18RiseScenarios(30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			i := slices.IndexFunc(tc.scs, func(sc sim.Scenario) bool { return sc.Name == "shopify-rest" })
			require.GreaterOrEqual(t, i, 0)
			sc := tc.scs[i]
			s := runManual(t, sc, fleet.Sluice("sluice", true, fleet.FigureOptions()), sc.Processes)
			require.GreaterOrEqual(t, s.GoodputRatio, 0.95, "%+v", s)
			require.LessOrEqual(t, s.ThrottleRatio, 0.01, "%+v", s)
			require.GreaterOrEqual(t, s.ReconvergeS, 0, "%+v", s)
			require.LessOrEqual(t, s.ReconvergeS, 3, "%+v", s)
		})
	}
}

// Issue 18: a provider that states the exact wait for its next token, to
// the millisecond (sim's RetryAfterMillis), refuses call after call when
// its limit halves, each with a pause of a few milliseconds that sheds no
// load. The fleet is back within seconds: those refusals are sized by the
// share served, not each cut 0.64 again as refusals soon after a pause
// (then it held 0.84-0.90 of the new limit, and re-converged only when a
// probe came, 11-14 s after the change, in 5 of 6 runs). Virtual time: the
// figures depend on the clients' logic alone, but not every run's goroutines
// take their turns in the same order, and goodput varies from run to run
// (0.946-0.97 for ban, where one run in ten or so fell under 0.95): the
// goodput is the median of 3 runs, as issue 18 gives its figures; every
// run must re-converge within 5 s, with no ban and at most 1 % refused.
// The provider that bans after five refusals of any kind in 10 s banned the
// fleet at the slow start's end while such a pause was only the few
// milliseconds asked (goodput 0.57), until a refusal paused the fleet
// 150 ms, long enough for every process to hear of it.
func TestSluiceReconvergesAfterPausesOfMilliseconds(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"retry-after-seconds", "ban", "ban-on-refusals"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			scs := fleet.Issue18Scenarios(60 * time.Second)
			i := slices.IndexFunc(scs, func(sc sim.Scenario) bool { return sc.Name == name })
			require.GreaterOrEqual(t, i, 0)
			sc := scs[i]
			sc.Provider.RetryAfterMillis = true
			var goodput []float64
			for range 3 {
				s := runManual(t, sc, fleet.Sluice("sluice", true, fleet.FigureOptions()), sc.Processes)
				require.LessOrEqual(t, s.ThrottleRatio, 0.01, "%+v", s)
				require.Zero(t, s.Bans, "%+v", s)
				require.GreaterOrEqual(t, s.ReconvergeS, 0, "%+v", s)
				require.LessOrEqual(t, s.ReconvergeS, 5, "%+v", s)
				goodput = append(goodput, s.GoodputRatio)
			}
			slices.Sort(goodput)
			require.GreaterOrEqual(t, goodput[1], 0.95, "the median of %v", goodput)
		})
	}
}

// Issue 18: two processes against a provider counting in windows of a
// second aligned to the clock and answering in 5 ms, faster than a call
// is in flight: no call in flight shows the window, and each process's
// share of the window's count moves between episodes. The fleet's count,
// summed through the store (outbound's tellShare, aimd's FleetCount), shows
// it after two episodes, and the fleet resumes at its level at once: it
// converges within 10 s, where it took 12 before, and is never banned by a
// provider that bans after five refusals in 10 s.
func TestSluiceLevelsAtAClockWindowAnsweredInMilliseconds(t *testing.T) {
	t.Parallel()
	scs := fleet.Issue18Scenarios(60 * time.Second)
	i := slices.IndexFunc(scs, func(sc sim.Scenario) bool { return sc.Name == "ban-on-refusals" })
	require.GreaterOrEqual(t, i, 0)
	sc := scs[i]
	sc.Provider.FixedWindow = true
	sc.Provider.Latency = 5 * time.Millisecond
	s := runManual(t, sc, fleet.Sluice("sluice", true, fleet.FigureOptions()), sc.Processes)
	require.Zero(t, s.Bans, "%+v", s)
	require.GreaterOrEqual(t, s.GoodputRatio, 0.95, "%+v", s)
	require.LessOrEqual(t, s.ThrottleRatio, 0.01, "%+v", s)
	require.GreaterOrEqual(t, s.ConvergeS, 0, "%+v", s)
	require.LessOrEqual(t, s.ConvergeS, 10, "%+v", s)
}
