package job_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/job"
	"github.com/sluicerl/sluice/store"
)

// TestHeartbeatKeepsLeaseAndLossCancelsHandler: while a handler runs its
// lease is extended every Heartbeat; once another claim has taken the job
// over, the next heartbeat is refused, the handler's context is cancelled
// and nothing more is written for the lost run.
func TestHeartbeatKeepsLeaseAndLossCancelsHandler(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		clk := clocktest.New(t0)
		s := b.open(t, clk)
		setupConnector(t, s, "p")
		addJob(t, s, clk, store.JobSpec{ID: "j", ConnectorID: "p"})
		started := make(chan struct{})
		h := func(ctx context.Context, run *job.Run) error {
			close(started)
			<-ctx.Done() // runs until its lease is lost
			return ctx.Err()
		}
		ev := &events{}
		w := mustWorker(t, job.Config{Store: s, Clock: clk, LeaseTTL: 30 * time.Second, Heartbeat: 10 * time.Second, OnEvent: ev.add,
			Handlers: map[string]job.Handler{"ohlcv": h}})
		done := make(chan error, 1)
		go func() {
			_, err := w.Poll(ctx)
			done <- err
		}()
		<-started
		for i := 1; i <= 3; i++ {
			clk.BlockUntilTimers(1) // the heartbeat is waiting
			clk.Advance(10 * time.Second)
			want := t0.Add(time.Duration(i)*10*time.Second + 30*time.Second)
			deadline := time.Now().Add(time.Minute)
			for getJob(t, s, "j").LeaseUntil.Before(want) {
				require.False(t, time.Now().After(deadline), "heartbeat %d never extended the lease", i)
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, want, getJob(t, s, "j").LeaseUntil)
		}
		// Another worker takes the job over (as if this one had stalled
		// past its lease); the next heartbeat finds out.
		cs, err := s.ClaimJobs(ctx, store.ClaimParams{Holder: "thief", LeaseTTL: time.Hour, Now: clk.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.Len(t, cs, 1)
		clk.BlockUntilTimers(1)
		clk.Advance(10 * time.Second)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("the handler was not cancelled after its lease was lost")
		}
		require.Contains(t, ev.kinds("j"), job.EventLeaseLost)
		j := getJob(t, s, "j")
		require.Equal(t, "thief", j.LeaseHolder)
		require.Zero(t, j.Failures)
	})
}
