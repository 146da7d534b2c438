package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store"
)

// fakeSub is a subscription a test controls: it counts subscribes and
// stops, and can fail or be lost.
type fakeSub struct {
	mu         sync.Mutex
	subscribes int
	stops      int
	err        error               // the next subscribe fails with it
	wake       *store.LeaseWakeups // of the open subscription
	lose       func()              // ends the open subscription as a lost connection would
	stopped    chan struct{}       // receives once per stop
}

func newFakeSub() *fakeSub { return &fakeSub{stopped: make(chan struct{}, 16)} }

func (f *fakeSub) subscribe(_ context.Context, wake *store.LeaseWakeups) (func(), <-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, nil, f.err
	}
	f.subscribes++
	f.wake = wake
	done := make(chan struct{})
	var once sync.Once
	end := func() {
		once.Do(func() {
			wake.WakeAll()
			close(done)
		})
	}
	f.lose = end
	return func() {
		f.mu.Lock()
		f.stops++
		f.mu.Unlock()
		end()
		f.stopped <- struct{}{}
	}, done, nil
}

func (f *fakeSub) counts() (subscribes, stops int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subscribes, f.stops
}

// waitStop waits for the subscription to be stopped.
func (f *fakeSub) waitStop(t *testing.T) {
	t.Helper()
	select {
	case <-f.stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the subscription was not stopped")
	}
}

func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestLeaseListenerSharesOneSubscription(t *testing.T) {
	t.Parallel()
	var l store.LeaseListener
	f := newFakeSub()
	ctx := context.Background()
	a, stopA, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	b, stopB, err := l.Watch(ctx, "b", f.subscribe)
	require.NoError(t, err)
	a2, stopA2, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	defer stopA()
	defer stopB()
	defer stopA2()
	subs, stops := f.counts()
	require.Equal(t, 1, subs, "one subscription for every watch")
	require.Zero(t, stops)

	f.wake.Wake("a")
	require.True(t, signalled(a))
	require.True(t, signalled(a2))
	require.False(t, signalled(b), "a release of another id")
}

// TestLeaseListenerLingers: the subscription outlives the last watch by
// Linger on the listener's clock, a watch within it keeps it, and a watch
// after it opens another.
func TestLeaseListenerLingers(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_000_000, 0))
	l := store.LeaseListener{Clock: clk, Linger: time.Minute}
	f := newFakeSub()
	ctx := context.Background()

	_, stop, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	stop()
	require.Equal(t, 1, clk.Timers(), "the linger starts with the last unwatch")
	_, stop, err = l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	require.Zero(t, clk.Timers(), "a watch cancels the linger")
	clk.Advance(time.Hour)
	subs, stops := f.counts()
	require.Equal(t, 1, subs)
	require.Zero(t, stops, "the subscription is kept while watched")

	stop()
	require.Equal(t, 1, clk.Timers())
	clk.Advance(time.Minute)
	f.waitStop(t)
	_, stop, err = l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	defer stop()
	subs, stops = f.counts()
	require.Equal(t, 2, subs, "a watch after the linger subscribes again")
	require.Equal(t, 1, stops)
}

// TestLeaseListenerUnwatchTwice: a second unwatch of one watch changes
// nothing; the other watch keeps the subscription.
func TestLeaseListenerUnwatchTwice(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_000_000, 0))
	l := store.LeaseListener{Clock: clk}
	f := newFakeSub()
	ctx := context.Background()
	_, stopA, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	b, stopB, err := l.Watch(ctx, "b", f.subscribe)
	require.NoError(t, err)
	stopA()
	stopA()
	require.Zero(t, clk.Timers(), "b still watches: no linger")
	f.wake.Wake("b")
	require.True(t, signalled(b))
	stopB()
	require.Equal(t, 1, clk.Timers())
	clk.Advance(store.LeaseListenLinger)
	f.waitStop(t)
}

// TestLeaseListenerReopensLost: a watch that finds the subscription lost
// opens another; the loss woke every watcher.
func TestLeaseListenerReopensLost(t *testing.T) {
	t.Parallel()
	var l store.LeaseListener
	f := newFakeSub()
	ctx := context.Background()
	a, stopA, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	defer stopA()
	f.lose()
	require.True(t, signalled(a), "a lost subscription wakes its watchers")
	_, stopB, err := l.Watch(ctx, "b", f.subscribe)
	require.NoError(t, err)
	defer stopB()
	subs, _ := f.counts()
	require.Equal(t, 2, subs)
	f.wake.Wake("a")
	require.True(t, signalled(a), "the first watch hears the new subscription")
}

// TestLeaseListenerSubscribeFails: the error is the watch's, no watch is
// counted, and the next watch subscribes again.
func TestLeaseListenerSubscribeFails(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.Unix(1_000_000, 0))
	l := store.LeaseListener{Clock: clk}
	f := newFakeSub()
	ctx := context.Background()
	boom := errors.New("boom")
	f.err = boom
	_, _, err := l.Watch(ctx, "a", f.subscribe)
	require.ErrorIs(t, err, boom)
	f.mu.Lock()
	f.err = nil
	f.mu.Unlock()
	_, stop, err := l.Watch(ctx, "a", f.subscribe)
	require.NoError(t, err)
	subs, _ := f.counts()
	require.Equal(t, 1, subs)
	stop()
	require.Equal(t, 1, clk.Timers(), "the failed watch was not counted")
}
