package job_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/outbound"
	profiles "github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// TestRunCallAppliesConnectorProfile: Run.Call applies the connector's
// provider profile: "hourly" admits one call an hour per connector, so the
// second call of a run goes out an hour (of the fake clock) after the
// first; a connector naming a profile the client lacks gets an error.
func TestRunCallAppliesConnectorProfile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "hourly.yaml")
	require.NoError(t, os.WriteFile(f, []byte(`schema: 1
name: hourly
revision: "1"
key: lower
limits:
  - {name: hour, scope: account, algorithm: gcra, capacity: 1, rate: 1, per: 1h}
`), 0o600))
	set, err := profiles.Load(f)
	require.NoError(t, err)
	ctx := context.Background()
	clk := clocktest.New(t0)
	s := memstore.NewJobStore(memstore.JobConfig{Clock: clk})
	for id, prof := range map[string]string{"acct": "hourly", "bad": "nope"} {
		_, _, err := s.UpsertConnector(ctx, store.Connector{ID: id, Profile: prof})
		require.NoError(t, err)
	}
	addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "acct", Interval: time.Hour})
	addJob(t, s, clk, store.JobSpec{ID: "k", ConnectorID: "bad", Interval: time.Hour})
	ob := newOutbound(t, clk, outbound.Config{ProviderProfiles: profiles.NewRegistry(set)})
	var mu sync.Mutex
	calls := map[string][]time.Time{}
	errs := map[string]error{}
	h := func(ctx context.Context, run *job.Run) error {
		id := run.Connector().ID
		for range 2 {
			err := run.Call(ctx, func(context.Context) error {
				mu.Lock()
				defer mu.Unlock()
				calls[id] = append(calls[id], clk.Now())
				return nil
			})
			if err != nil {
				mu.Lock()
				errs[id] = err
				mu.Unlock()
				return err
			}
		}
		return nil
	}
	w := mustWorker(t, job.Config{Store: s, Clock: clk, Outbound: ob, Handlers: map[string]job.Handler{"ohlcv": h}})
	pollUntilIdle(t, w, 10)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, calls["acct"], 2)
	require.GreaterOrEqual(t, calls["acct"][1].Sub(calls["acct"][0]), 59*time.Minute, "the profile's hour between the calls")
	require.Empty(t, calls["bad"])
	require.ErrorIs(t, errs["bad"], outbound.ErrUnknownProfile)
}
