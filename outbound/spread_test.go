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

// leaveAfterAStall returns when each of calls attempts on a key paced at
// 10/s (100 ms apart) with the pacing burst burst left, their store
// deciding their turns 100 ms apart but holding every answer back until
// release after the first was asked.
func leaveAfterAStall(t *testing.T, burst int64, calls int, release time.Duration) []time.Time {
	t.Helper()
	clk := watch(t0)
	const interval = 100 * time.Millisecond
	st := &heldAnswers{Store: memstore.New(memstore.Config{Clock: clk}), clk: clk, interval: interval, release: t0.Add(release)}
	base := &departures{clk: clk}
	c, err := outbound.New(outbound.Config{Base: base, Clock: clk, Store: st, Burst: burst,
		AIMD: aimd.Config{Start: 10, SlowStart: -1, UsageMultiple: -1}, Retry: retry.Config{MaxAttempts: 1}})
	require.NoError(t, err)
	driveAll(t, clk, calls, func() {
		resp := get(t, c, "http://api.test/")
		_ = resp.Body.Close()
	})
	slices.SortFunc(base.at, time.Time.Compare)
	require.Len(t, base.at, calls)
	return base.at
}

// Issue 18: a stalling store must not make a process send in bunches. Its
// turns were booked 100 ms apart, but the store answered two of them
// together, 150 ms after the first: they leave half an interval apart,
// not at that instant: neither turn passed more than two intervals
// before, and the bunch drains at twice the pace.
func TestStalledAnswersDoNotLeaveTogether(t *testing.T) {
	t.Parallel()
	at := leaveAfterAStall(t, 1, 2, 150*time.Millisecond)
	require.Equal(t, []time.Time{t0.Add(150 * time.Millisecond), t0.Add(200 * time.Millisecond)}, at,
		"spread half an interval apart from the answer")
}

// Issue 18, a saturated machine: a store that decided 4 turns 100 ms apart
// and answered them all 550 ms after the first. Every turn passed more
// than two intervals before: the calls leave a whole interval apart from
// the answer, at the pace, not half an interval apart (twice the pace).
func TestTurnsThatPassedInAStallLeaveAtThePace(t *testing.T) {
	t.Parallel()
	at := leaveAfterAStall(t, 1, 4, 550*time.Millisecond)
	want := make([]time.Time, 4)
	for i := range want {
		want[i] = t0.Add(550*time.Millisecond + time.Duration(i)*100*time.Millisecond)
	}
	require.Equal(t, want, at, "an interval apart")
}

// A key paced with a burst lets that burst through at once, however its
// turns came.
func TestABurstStillLeavesTogether(t *testing.T) {
	t.Parallel()
	at := leaveAfterAStall(t, 4, 4, 500*time.Millisecond)
	require.Equal(t, at[0], at[3], "a burst of 4 leaves together")
}
