package sim_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/sim"
)

// TestScenarioJSON: a scenario's JSON writes durations as Go durations,
// and reads back through ParseScenario as the same scenario.
func TestScenarioJSON(t *testing.T) {
	t.Parallel()
	sc := sim.Scenario{
		Name: "shop",
		Provider: sim.ProviderConfig{
			Dialect: sim.Ban, Limit: 20, Latency: 5 * time.Millisecond, Jitter: 3 * time.Millisecond, Burst: 1500 * time.Millisecond,
			BanWindow: 10 * time.Second, BanFor: 2 * time.Second, Window: time.Second,
			Changes: []sim.Change{{At: 15 * time.Second, Limit: 10}},
		},
		Workers: 4, Processes: 2, Duration: 30 * time.Second, SlowAfter: 250 * time.Millisecond,
	}
	b, err := json.Marshal(sc)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "30s", m["duration"])
	require.Equal(t, "250ms", m["slow_after"])
	p := m["provider"].(map[string]any)
	require.Equal(t, "5ms", p["latency"])
	require.Equal(t, "3ms", p["jitter"])
	require.Equal(t, "1.5s", p["burst"])
	require.Equal(t, "10s", p["ban_window"])
	require.Equal(t, "2s", p["ban_for"])
	require.Equal(t, "1s", p["window"])
	require.Equal(t, "15s", p["changes"].([]any)[0].(map[string]any)["at"])
	require.Equal(t, "ban", p["dialect"])

	back, err := sim.ParseScenario(b)
	require.NoError(t, err)
	require.Equal(t, sc, back)

	// Zero durations stay out, as before.
	b, err = json.Marshal(sim.ProviderConfig{Limit: 5})
	require.NoError(t, err)
	require.JSONEq(t, `{"dialect":"retry-after-seconds","limit":5}`, string(b))
}
