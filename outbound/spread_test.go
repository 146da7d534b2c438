package outbound_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/outbound"
	"github.com/sluicerl/sluice/retry"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// heldAnswers is a store that stalls the way a Redis starved of CPU does:
// the n-th booking is asked n intervals after the first (its worker was
// ready then, and its turn is due at once), and every answer is held back
// until release, so that turns booked a whole interval apart all reach
// their callers at that one instant.
type heldAnswers struct {
	*memstore.Store
	clk      *watched
	interval time.Duration
	release  time.Time
	mu       sync.Mutex
	n        int
}

func (s *heldAnswers) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	s.mu.Lock()
	n := s.n
	s.n++
	s.mu.Unlock()
	if err := sleepOn(ctx, s.clk, time.Duration(n)*s.interval); err != nil {
		return store.AllResult{}, err
	}
	r, err := s.Store.TakeAll(ctx, p)
	if err != nil {
		return r, err
	}
	return r, sleepOn(ctx, s.clk, s.release.Sub(s.clk.Now()))
}

func sleepOn(ctx context.Context, clk *watched, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	tm := clk.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// departures records when each attempt reached the provider.
type departures struct {
	clk *watched
	mu  sync.Mutex
	at  []time.Time
}

func (d *departures) RoundTrip(*http.Request) (*http.Response, error) {
	d.mu.Lock()
	d.at = append(d.at, d.clk.Now())
	d.mu.Unlock()
	return response(200, "ok")(), nil
}

// leaveAfterAStall returns when each of 4 attempts on a key paced at 10/s
// (100 ms apart) left, their store holding every answer back until 500 ms
// in, and the key's pacing burst.
func leaveAfterAStall(t *testing.T, burst int64) []time.Time {
	t.Helper()
	clk := watch(t0)
	const interval = 100 * time.Millisecond
	st := &heldAnswers{Store: memstore.New(memstore.Config{Clock: clk}), clk: clk, interval: interval, release: t0.Add(5 * interval)}
	base := &departures{clk: clk}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: st, Burst: burst,
		AIMD: aimd.Config{Start: 10, SlowStart: -1, UsageMultiple: -1}, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	driveAll(t, clk, 4, func() {
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	})
	slices.SortFunc(base.at, time.Time.Compare)
	require.Len(t, base.at, 4)
	return base.at
}

// Issue 18: a stalling store must not make a process send in bunches. Its
// turns were booked 100 ms apart, but the store answered them all at
// once; they leave at least half an interval apart, not at that instant.
func TestStalledAnswersDoNotLeaveTogether(t *testing.T) {
	t.Parallel()
	at := leaveAfterAStall(t, 1)
	require.Equal(t, t0.Add(500*time.Millisecond), at[0], "the first leaves when the store answers")
	for i := 1; i < len(at); i++ {
		require.GreaterOrEqual(t, at[i].Sub(at[i-1]), 50*time.Millisecond, "attempt %d left %v after the one before", i, at[i].Sub(at[i-1]))
	}
	// Spread, not held back further: the last left 150 ms after the first.
	require.Equal(t, t0.Add(650*time.Millisecond), at[3])
}

// A key paced with a burst lets that burst through at once, however its
// turns came.
func TestABurstStillLeavesTogether(t *testing.T) {
	t.Parallel()
	at := leaveAfterAStall(t, 4)
	require.Equal(t, at[0], at[3], "a burst of 4 leaves together")
}
