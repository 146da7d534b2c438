package fleet_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/sim"
	"github.com/sluicerl/sluice/sim/fleet"
)

// Every contender runs a short scenario; the fixed paces hold their rate.
func TestContenders(t *testing.T) {
	t.Parallel()
	sc := sim.Scenario{Provider: sim.ProviderConfig{Dialect: sim.Bare429, Limit: 20, Latency: 2 * time.Millisecond},
		Workers: 4, Processes: 2, Duration: 2 * time.Second}
	contenders := append(fleet.Standard(fleet.FigureOptions()), fleet.Unpaced("unpaced"))
	rows, err := sim.RunTable(t.Context(), []sim.Scenario{sc}, contenders, nil)
	require.NoError(t, err)
	got := map[string]sim.Summary{}
	for _, r := range rows {
		got[r.Contender] = r.Summary
	}
	require.Len(t, got, 7)
	// Half the limit, exactly: 10/s for 2 s (one more at each start).
	require.InDelta(t, 20, got["fixed-0.5x"].Offered, 3)
	require.Zero(t, got["fixed-0.5x"].Throttles)
	// Twice the limit is throttled; the unpaced fleet far more so.
	require.Positive(t, got["fixed-2x"].Throttles)
	require.Greater(t, got["unpaced"].Offered, got["fixed-2x"].Offered)
	// Sluice starts conservatively: far fewer attempts than unpaced.
	require.Less(t, got["sluice"].Offered, got["unpaced"].Offered/4)
}

func TestFixedRejectsBadFactor(t *testing.T) {
	t.Parallel()
	_, err := fleet.FixedGCRA("bad", 0).NewRun(sim.Scenario{})
	require.ErrorIs(t, err, sim.ErrInvalidConfig)
}
