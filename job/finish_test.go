package job_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
)

// TestGroupCommittedFinishesFencedEach: three jobs of one Run loop end
// together, so their successes go out together (on PostgreSQL in the
// transaction of the loop's next claim); one of them lost its lease to
// another worker meanwhile. Its finish is refused (lease_lost, nothing
// written) while the other two are written, and each success is durable
// before its event reports it.
func TestGroupCommittedFinishesFencedEach(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "x", ConnectorID: "p", Type: "lossy"})
		addJob(t, s, clk, store.JobSpec{ID: "y", ConnectorID: "p"})
		addJob(t, s, clk, store.JobSpec{ID: "z", ConnectorID: "p"})

		started, thaw := make(chan string, 3), make(chan struct{})
		frozen := func(_ context.Context, r *job.Run) error {
			started <- r.Job().ID
			<-thaw
			return nil
		}
		type seen struct {
			kind    job.EventKind
			durable bool // the store showed the success when it was reported
		}
		var mu sync.Mutex
		outcomes := map[string]seen{}
		onEvent := func(e job.Event) {
			if e.Kind == job.EventClaim {
				return
			}
			durable := false
			if e.Kind == job.EventSuccess {
				j, err := s.GetJob(context.Background(), e.JobID)
				durable = err == nil && j.LeaseHolder == "" && !j.LastSuccessAt.IsZero()
			}
			mu.Lock()
			outcomes[e.JobID] = seen{e.Kind, durable}
			mu.Unlock()
		}
		// A's heartbeats are off, so that its leases expire on the fake
		// clock: with its three slots full A must claim nothing more, or
		// its own claim ahead would take y and z back from itself.
		a := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "A", Concurrency: 3, ClaimAhead: -1, LeaseTTL: time.Minute, Heartbeat: 1000 * time.Hour,
			OnEvent: onEvent, Handlers: map[string]job.Handler{"ohlcv": frozen, "lossy": frozen}})
		ctx, stop := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- a.Run(ctx) }()
		for range 3 {
			select {
			case <-started:
			case <-time.After(time.Minute):
				t.Fatal("worker A did not start its three jobs")
			}
		}
		// A's leases expire; B takes x over (its only type) and finishes
		// it, while y and z are kept alive as A's heartbeats would (A's own
		// run on the fake clock, which would keep x too).
		clk.Advance(2 * time.Minute)
		for _, id := range []string{"y", "z"} {
			_, err := s.Heartbeat(context.Background(), store.HeartbeatParams{Fence: store.Fence{JobID: id, Token: getJob(t, s, id).LeaseToken},
				LeaseTTL: time.Hour, Now: clk.Now()})
			require.NoError(t, err)
		}
		bw := mustWorker(t, job.Config{Store: s, Clock: clk, Holder: "B", LeaseTTL: time.Minute,
			Handlers: map[string]job.Handler{"lossy": func(context.Context, *job.Run) error { return nil }}})
		n, err := bw.Poll(context.Background())
		require.NoError(t, err)
		require.Equal(t, 1, n)
		close(thaw)
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(outcomes) == 3
		}, time.Minute, 5*time.Millisecond, "A reported an outcome for each job")
		stop()
		select {
		case err := <-runErr:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("worker A did not stop")
		}
		mu.Lock()
		require.Equal(t, seen{job.EventLeaseLost, false}, outcomes["x"])
		require.Equal(t, seen{job.EventSuccess, true}, outcomes["y"])
		require.Equal(t, seen{job.EventSuccess, true}, outcomes["z"])
		mu.Unlock()

		x := getJob(t, s, "x")
		require.Empty(t, x.LeaseHolder)
		rs := runs(t, s, "x")
		require.Len(t, rs, 2)
		require.Equal(t, "B", rs[0].Holder)
		require.Equal(t, store.RunSucceeded, rs[0].Outcome)
		require.Equal(t, "A", rs[1].Holder)
		require.Equal(t, store.RunAbandoned, rs[1].Outcome, "A's refused finish wrote nothing")
		for _, id := range []string{"y", "z"} {
			rs := runs(t, s, id)
			require.Len(t, rs, 1)
			require.Equal(t, store.RunSucceeded, rs[0].Outcome)
			require.Equal(t, "A", rs[0].Holder)
		}
	})
}
