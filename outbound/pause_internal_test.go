package outbound

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Issue 18: the calls in flight when the first refusal came are refused
// too, and their Retry-After ends a little after the first one's. Heard
// from the store just after the first pause ended, such a pause is its
// tail: the key waits for it, but does not cut its rate again (that second
// cut, twice as deep as for a refusal soon after a pause, left the
// process far under its share, and a provider that bans after a few
// refusals counts each one). A pause ending well after is news.
func TestPauseTailIsNoNewRefusal(t *testing.T) {
	t.Parallel()
	ctl, err := aimd.New(aimd.Config{Start: 100, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9})
	require.NoError(t, err)
	a := newAdaptive(ctl)
	const sec = int64(time.Second / time.Microsecond)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	news, _ := a.notePause(now, sec, 0, false)
	require.True(t, news)
	rate := a.rate()
	require.Less(t, rate, 100.0)
	// 2 ms after it ended, a pause of 20 ms: the tail.
	news, _ = a.notePause(now+sec+2_000, 20_000, 0, false)
	require.False(t, news)
	require.Equal(t, rate, a.rate(), "no second cut")
	require.True(t, a.paused(now+sec+20_000), "but the key waits for it")
	require.False(t, a.paused(now+sec+23_000))
	// 3 s later, a pause of a second: a new refusal.
	news, _ = a.notePause(now+4*sec, sec, 0, false)
	require.True(t, news)
	require.Less(t, a.rate(), rate)
}

// Issue 18: a key paced at a rate the provider states (IETF RateLimit-
// Policy) is not cut for a pause heard from the store: it may be another
// process's exhausted quota waiting for its reset (RateLimit r=0), no
// refusal; nor for the one this process put there itself. It waits for
// both.
func TestStatedRateIsNotCutForAHeardPause(t *testing.T) {
	t.Parallel()
	ctl, err := aimd.New(aimd.Config{SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.9})
	require.NoError(t, err)
	const sec = int64(time.Second / time.Microsecond)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=100;w=1`)
	h.Set("RateLimit", `"default";r=40;t=1`)
	rep := signal.Parse(now, signal.Response{Status: 200, Header: h})
	a := newAdaptive(ctl)
	a.observe(aimd.Sample{Outcome: aimd.Success, Latency: 10_000}, &rep, now, 0)
	rate := a.rate()
	require.InDelta(t, statedMargin*100, rate, 1e-9, "paced at the stated rate")
	news, _ := a.notePause(now+sec/2, sec/2, 0, false)
	require.True(t, news)
	require.Equal(t, rate, a.rate(), "no cut")
	require.True(t, a.paused(now+sec-1))

	// This process's own exhausted quota: r=0 pauses the fleet until the
	// reset (t=1 is rounded up: the window of a second aligned to the
	// clock ends at the next whole second, half a second away); read
	// back from the store, it cuts nothing either.
	b := newAdaptive(ctl)
	b.observe(aimd.Sample{Outcome: aimd.Success, Latency: 10_000}, &rep, now, 0)
	h.Set("RateLimit", `"default";r=0;t=1`)
	rep = signal.Parse(now+sec/2, signal.Response{Status: 200, Header: h})
	o := b.observe(aimd.Sample{Outcome: aimd.Success, Latency: 10_000}, &rep, now+sec/2, 0)
	require.Equal(t, sec/2, o.pause)
	news, _ = b.notePause(now+sec/2+1000, sec/2-1000, 0, false)
	require.False(t, news)
	require.Equal(t, rate, b.rate())
	require.True(t, b.paused(now+sec-1))
	require.False(t, b.paused(now+sec))
}

// Issue 18, a loaded machine: a window of a second (IETF RateLimit, t in
// whole seconds, rounded up) spent by the last call sent in it, answered
// 13 ms into the next second, said r=0;t=1, and the fleet stopped for the
// whole next window. The window may reset up to a second before t, and a
// window of whole seconds is aligned to the clock: the stop lasts until
// the first whole second after the earliest the reset can be, none here,
// and the rest of the second when the window was spent half way through
// it. A reset given to the microsecond is kept as it is.
func TestASpentWindowStopsUntilItsReset(t *testing.T) {
	t.Parallel()
	const sec = int64(time.Second / time.Microsecond)
	const ms = sec / 1000
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for _, tc := range []struct {
		name                  string
		sent, answered, reset int64
		want                  int64
	}{
		{"spent by the second's last call, answered in the next", t0 + 993*ms, t0 + sec + 13*ms, sec, 0},
		{"spent half way through the second", t0 + 480*ms, t0 + 500*ms, sec, 500 * ms},
		{"a window of two seconds, spent in its first", t0 + 480*ms, t0 + 500*ms, 2 * sec, 1500 * ms},
		{"a reset to the microsecond", t0 + 480*ms, t0 + 500*ms, 700*ms + 1, 700*ms + 1},
		{"no reset", t0, t0 + 10*ms, 0, 0},
	} {
		require.Equal(t, tc.want, spentFor(tc.reset, tc.answered, tc.answered-tc.sent), tc.name)
	}
	// Through observe: a pause only when there is one to wait.
	ctl, err := aimd.New(aimd.Config{SlowStart: -1, IgnoreLatency: true})
	require.NoError(t, err)
	a := newAdaptive(ctl)
	h := http.Header{}
	h.Set("RateLimit-Policy", `"default";q=100;w=1`)
	h.Set("RateLimit", `"default";r=0;t=1`)
	at := t0 + sec + 13*ms
	rep := signal.Parse(at, signal.Response{Status: 200, Header: h})
	o := a.observe(aimd.Sample{Outcome: aimd.Success, Latency: 20 * ms}, &rep, at, 0)
	require.Zero(t, o.pause, "the window spent was the last second's")
	require.False(t, a.paused(at))
}

// A refusal is excused as a bunch (aimd.Sample.Bunched) only when the
// process's timers fire late by an eighth of the interval between the
// key's calls or more: at 50 calls a second, 2.5 ms, well above a quiet
// machine's fraction of a millisecond.
func TestBunchedAt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		lag  int64 // µs
		rate float64
		want bool
	}{
		{0, 50, false},
		{300, 50, false},
		{2_000, 50, false},
		{2_500, 50, true},
		{30_000, 50, true},
		{300, 1000, true},
		{2_500, 0, false},
	} {
		require.Equal(t, tc.want, bunchedAt(tc.lag, tc.rate), "lag %d µs at %v/s", tc.lag, tc.rate)
	}
}

// pauseWatch is a store that calls after once each Sync has been applied,
// and duringTake, once, after the first TakeAll has been applied and
// before its answer reaches the caller.
type pauseWatch struct {
	store.RateStore
	after      func(key string)
	duringTake func()
}

func (s *pauseWatch) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	r, err := s.RateStore.TakeAll(ctx, p)
	if f := s.duringTake; f != nil {
		s.duringTake = nil
		f()
	}
	return r, err
}

func (s *pauseWatch) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	r, err := s.RateStore.Sync(ctx, p)
	if s.after != nil {
		s.after(p.Key)
	}
	return r, err
}

// Issue 18, two real processes: the banned one wrote the fleet's pause and
// then the mark that says it is a ban; the other read the pause between
// the two writes, found no mark, and took the ban for a refusal (one cut,
// not the restart every process makes after a ban). The mark is written
// first: whoever sees the pause sees the ban.
func TestABansMarkIsThereWhenItsPauseIs(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.UnixMicro(t0))
	st := &pauseWatch{RateStore: memstore.New(memstore.Config{Clock: clk})}
	c, err := New(Config{Clock: clk, Store: st})
	require.NoError(t, err)
	ks := c.keys.acquire("api.ban.test", "api.ban.test")
	defer c.keys.release(ks)
	ctx := context.Background()
	seen, banned := false, false
	st.after = func(key string) {
		if key == ks.names.pause {
			// Another process hears of the pause at this instant.
			seen, banned = true, c.readBan(ctx, ks)
		}
	}
	h := http.Header{}
	h.Set("Retry-After", "30")
	now := clk.Now().UnixMicro()
	rep := signal.Parse(now, signal.Response{Status: http.StatusTeapot, Header: h})
	require.True(t, rep.Banned)
	c.observe(ctx, ks, &rep, 5*time.Millisecond, now)
	require.True(t, seen, "the pause was synced")
	require.True(t, banned, "the ban's mark was there when its pause was")
}

// Issue 18, real processes against a clock window: a call left 0.3-0.5 ms
// after its own process had been refused, and was refused too, one more
// refusal for a provider that bans after five in 10 s. The refusal came
// while the store answered the call's turn: the key was paused here, but
// the pause had not reached the store yet, so the store let the turn
// through. The call waits for the pause instead.
func TestAPauseThatBeganWhileTheStoreAnsweredHoldsTheCall(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(time.UnixMicro(t0))
	st := &pauseWatch{RateStore: memstore.New(memstore.Config{Clock: clk})}
	c, err := New(Config{Clock: clk, Store: st})
	require.NoError(t, err)
	ks := c.keys.acquire("api.window.test", "api.window.test")
	defer c.keys.release(ks)
	h := http.Header{}
	h.Set("Retry-After", "1")
	st.duringTake = func() {
		// Another worker of this process is answered a 429 now; its
		// pause is kept here and not yet in the store.
		now := clk.Now().UnixMicro()
		rep := signal.Parse(now, signal.Response{Status: http.StatusTooManyRequests, Header: h})
		ks.adapt.observe(sample(&rep, 20*time.Millisecond), &rep, now, 0)
	}
	done, left := startWait(t, clk, func() error { return c.wait(context.Background(), ks) })
	require.False(t, left, "the call left during the pause")
	clk.Advance(time.Second)
	select {
	case err := <-done:
		require.NoError(t, err, "it leaves once the pause is over")
	case <-time.After(30 * time.Second):
		t.Fatal("the call still waits after the pause")
	}
}

// A throttle's exact wait of a few milliseconds is held to minRefusalPause
// (see TestAShortRetryAfterPausesTheFleetLongEnoughToBeHeard); a longer
// one is the wait; what is left of an HTTP-date's whole second never is
// held, nor a ban's own wait.
func TestRefusalPauseHoldsAShortExactWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rep  signal.Report
		want int64
	}{
		{"exact wait", signal.Report{Throttled: true, HasRetryAfter: true, RetryAfter: 4_000}, minRefusalPause},
		{"no wait", signal.Report{Throttled: true, HasRetryAfter: true}, minRefusalPause},
		{"long wait", signal.Report{Throttled: true, HasRetryAfter: true, RetryAfter: 900_000}, 900_000},
		{"a date's end", signal.Report{Throttled: true, HasRetryAfter: true, RetryAfter: 50_000, RetryAfterDate: true}, 50_000},
		{"a ban", signal.Report{Throttled: true, Banned: true, HasRetryAfter: true, RetryAfter: 50_000}, 50_000},
		{"no header", signal.Report{Throttled: true}, 0},
	} {
		require.Equal(t, tc.want, refusalPause(&tc.rep), tc.name)
	}
}
