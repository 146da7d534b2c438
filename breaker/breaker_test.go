package breaker

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// t0 is an arbitrary instant (2030-01-01T00:00:00Z) in Unix microseconds.
var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

const (
	ms  = int64(1000)
	sec = 1000 * ms
)

func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	require.NoError(t, err)
	return p
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg Config
		msg string
	}{
		{Config{Window: -time.Second}, "Window"},
		{Config{FailureRate: 1.5}, "FailureRate"},
		{Config{Buckets: MaxBuckets + 1}, "Buckets"},
		{Config{Window: 10 * time.Microsecond, Buckets: 3}, "whole-microsecond"},
		{Config{HalfOpenProbes: -1}, "HalfOpenProbes"},
	} {
		_, err := New(tc.cfg)
		require.ErrorIs(t, err, ErrInvalidConfig, "%+v", tc.cfg)
		require.ErrorContains(t, err, tc.msg, "%+v", tc.cfg)
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status            int
		network, canceled bool
		want              Outcome
	}{
		{200, false, false, Success},
		{302, false, false, Success},
		{400, false, false, Success},
		{404, false, false, Success},
		{408, false, false, Success},
		{429, false, false, Failure},
		{500, false, false, Failure},
		{503, false, false, Failure},
		{0, true, false, Failure},
		{0, false, true, Ignored},
		{503, false, true, Ignored},
	} {
		require.Equal(t, tc.want, Classify(tc.status, tc.network, tc.canceled), "%+v", tc)
	}
}

// op is one step: an Allow (record false) or a Record of the last ticket
// (or of a fresh Allow's ticket when allow is set as well).
type op struct {
	at      int64 // µs after t0
	allow   bool  // call Allow first
	outcome Outcome
	err     error // Allow's error
	state   State // after the step
	event   Reason
}

func run(t *testing.T, p *Policy, ops []op) []Event {
	t.Helper()
	var (
		b      Breaker
		events []Event
		ticket Ticket
	)
	for i, o := range ops {
		now := t0 + o.at
		var got Reason
		if o.allow {
			tk, ev, err := p.Allow(&b, now)
			require.ErrorIs(t, err, o.err, "step %d", i)
			if o.err == nil {
				require.NoError(t, err, "step %d", i)
			}
			if ev.Changed() {
				events = append(events, ev)
				got = ev.Reason
			}
			if err != nil {
				require.Equal(t, o.state, b.State(), "step %d", i)
				require.Equal(t, o.event, got, "step %d", i)
				continue
			}
			ticket = tk
		}
		if o.outcome != 0 {
			if ev := p.Record(&b, now, ticket, o.outcome); ev.Changed() {
				events = append(events, ev)
				got = ev.Reason
			}
		}
		require.Equal(t, o.state, b.State(), "step %d", i)
		require.Equal(t, o.event, got, "step %d", i)
	}
	return events
}

func repeat(n int, o op) []op {
	out := make([]op, n)
	for i := range out {
		out[i] = o
	}
	return out
}

func cat(parts ...[]op) []op {
	var out []op
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	cfg := Config{Window: 10 * time.Second, Buckets: 10, MinRequests: 10, FailureRate: 0.5, ConsecutiveFailures: 5,
		OpenTimeout: 5 * time.Second, HalfOpenProbes: 2}
	okAt := func(at int64) op { return op{at: at, allow: true, outcome: Success, state: Closed} }
	failAt := func(at int64) op { return op{at: at, allow: true, outcome: Failure, state: Closed} }
	for _, tc := range []struct {
		name string
		ops  []op
	}{
		{
			name: "minimum throughput: a cold start's failures do not trip on rate",
			ops:  cat(repeat(4, failAt(0)), []op{okAt(0)}, repeat(4, failAt(0))),
		},
		{
			name: "consecutive failures trip",
			ops:  cat(repeat(4, failAt(0)), []op{{allow: true, outcome: Failure, state: Open, event: ReasonConsecutiveFailures}}),
		},
		{
			name: "failure rate trips once the window holds enough",
			ops: cat(repeat(5, okAt(0)),
				[]op{failAt(sec), okAt(sec), failAt(sec), failAt(sec), okAt(sec), failAt(sec), // 4 of 11
					okAt(2 * sec), failAt(2 * sec)}, // 5 of 13
				repeat(2, failAt(2*sec)), // 7 of 15, 3 in a row
				[]op{{at: 2 * sec, allow: true, outcome: Failure, state: Open, event: ReasonFailureRate}}), // 8 of 16
		},
		{
			name: "old buckets slide out of the window",
			// Epoch 1's bucket is still in its slot at 12.5s, but out of
			// the window (epochs 3 to 12).
			ops: cat(alternate(sec, failAt, okAt), alternate(12500*ms, failAt, okAt)),
		},
		{
			name: "within the window they count",
			ops: cat(alternate(0, failAt, okAt),
				[]op{{at: 9500 * ms, allow: true, outcome: Failure, state: Open, event: ReasonFailureRate}}), // 6 of 10
		},
		{
			name: "4xx other than 429 count as successes, canceled calls not at all",
			ops: cat(repeat(4, failAt(0)), []op{{allow: true, outcome: Ignored, state: Closed}, okAt(0)},
				repeat(4, failAt(0)), []op{{allow: true, outcome: Failure, state: Open, event: ReasonConsecutiveFailures}}),
		},
		{
			name: "open refuses until the timeout, then probes; probes succeed and close",
			ops: cat(repeat(4, failAt(0)),
				[]op{
					{allow: true, outcome: Failure, state: Open, event: ReasonConsecutiveFailures},
					{at: 4999 * ms, allow: true, err: ErrOpen, state: Open},
					{at: 5 * sec, allow: true, state: HalfOpen, event: ReasonOpenTimeout},          // probe 1 admitted
					{at: 5 * sec, allow: true, state: HalfOpen},                                    // probe 2
					{at: 5 * sec, allow: true, err: ErrProbeLimit, state: HalfOpen},                // budget in use
					{at: 5100 * ms, outcome: Success, state: HalfOpen},                             // probe 2 ok
					{at: 5100 * ms, outcome: Success, state: Closed, event: ReasonProbesSucceeded}, // probe 1 ok (same ticket generation)
					okAt(6 * sec),
				}),
		},
		{
			name: "a failed probe opens again for a full timeout",
			ops: cat(repeat(4, failAt(0)),
				[]op{
					{allow: true, outcome: Failure, state: Open, event: ReasonConsecutiveFailures},
					{at: 5 * sec, allow: true, outcome: Failure, state: Open, event: ReasonProbeFailed},
					{at: 9 * sec, allow: true, err: ErrOpen, state: Open},
					{at: 10 * sec, allow: true, outcome: Success, state: HalfOpen, event: ReasonOpenTimeout},
				}),
		},
		{
			name: "a canceled probe gives its slot back",
			ops: cat(repeat(4, failAt(0)),
				[]op{
					{allow: true, outcome: Failure, state: Open, event: ReasonConsecutiveFailures},
					{at: 5 * sec, allow: true, outcome: Ignored, state: HalfOpen, event: ReasonOpenTimeout},
					{at: 5 * sec, allow: true, outcome: Success, state: HalfOpen},
					{at: 5 * sec, allow: true, outcome: Success, state: Closed, event: ReasonProbesSucceeded},
				}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			run(t, mustNew(t, cfg), tc.ops)
		})
	}
}

// alternate returns F S F S F S F S F at one instant: 5 failures of 9,
// under MinRequests on its own.
func alternate(at int64, fail, ok func(int64) op) []op {
	var out []op
	for i := range 9 {
		if i%2 == 0 {
			out = append(out, fail(at))
		} else {
			out = append(out, ok(at))
		}
	}
	return out
}

func TestEvents(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{MinRequests: 4, FailureRate: 0.5, ConsecutiveFailures: -1, OpenTimeout: 5 * time.Second, HalfOpenProbes: 1})
	var b Breaker
	var events []Event
	record := func(now int64, o Outcome) {
		tk, ev, err := p.Allow(&b, now)
		require.NoError(t, err)
		require.False(t, ev.Changed())
		if ev := p.Record(&b, now, tk, o); ev.Changed() {
			events = append(events, ev)
		}
	}
	record(t0, Success)
	record(t0+sec, Failure)
	record(t0+sec, Success)
	// A call admitted now and reported after the breaker opened belongs
	// to an older generation: ignored.
	late, _, err := p.Allow(&b, t0+sec)
	require.NoError(t, err)
	record(t0+2*sec, Failure) // 2 of 4: opens
	require.Equal(t, Open, b.State())
	require.False(t, p.Record(&b, t0+3*sec, late, Failure).Changed())
	until, open := p.OpenUntil(&b)
	require.True(t, open)
	require.Equal(t, t0+7*sec, until)

	tk, ev, err := p.Allow(&b, t0+7*sec)
	require.NoError(t, err)
	require.True(t, tk.Probe)
	events = append(events, ev)
	events = append(events, p.Record(&b, t0+7*sec+500*ms, tk, Success))
	require.Equal(t, []Event{
		{From: Closed, To: Open, Reason: ReasonFailureRate, At: t0 + 2*sec, Elapsed: 2 * sec, Counts: Counts{Requests: 4, Failures: 2, Consecutive: 1}, Generation: 1},
		{From: Open, To: HalfOpen, Reason: ReasonOpenTimeout, At: t0 + 7*sec, Elapsed: 5 * sec, Generation: 2},
		{From: HalfOpen, To: Closed, Reason: ReasonProbesSucceeded, At: t0 + 7*sec + 500*ms, Elapsed: 500 * ms, Counts: Counts{Probes: 1, ProbeSuccesses: 1}, Generation: 3},
	}, events)
	require.Equal(t, "closed", Closed.String())
	require.Equal(t, "half_open", HalfOpen.String())
	require.Equal(t, "probes_succeeded", ReasonProbesSucceeded.String())
}

func TestLostProbeIsReplaced(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1})
	var b Breaker
	tk, _, _ := p.Allow(&b, t0)
	p.Record(&b, t0, tk, Failure)
	_, _, err := p.Allow(&b, t0+sec) // a probe that never reports
	require.NoError(t, err)
	_, _, err = p.Allow(&b, t0+1500*ms)
	require.ErrorIs(t, err, ErrProbeLimit)
	tk, _, err = p.Allow(&b, t0+2*sec)
	require.NoError(t, err, "after an open timeout the lost probe's slot is reused")
	require.Equal(t, Closed, func() State { p.Record(&b, t0+2*sec, tk, Success); return b.State() }())
}

func TestLateReportOfALostProbeFreesNoSlot(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 1})
	var b Breaker
	tk, _, _ := p.Allow(&b, t0)
	p.Record(&b, t0, tk, Failure)
	lost, _, err := p.Allow(&b, t0+sec)
	require.NoError(t, err)
	probe, _, err := p.Allow(&b, t0+2*sec) // the lost probe's slot, reused
	require.NoError(t, err)
	// The lost probe turns up after all, canceled: its slot was already
	// given away, so the probe still out keeps the budget full.
	p.Record(&b, t0+2*sec, lost, Ignored)
	_, _, err = p.Allow(&b, t0+2*sec)
	require.ErrorIs(t, err, ErrProbeLimit, "one probe is out, the budget is one")
	// The probe still out reports: its slot returns.
	p.Record(&b, t0+2*sec, probe, Ignored)
	probe, _, err = p.Allow(&b, t0+2*sec)
	require.NoError(t, err)
	require.Equal(t, Closed, func() State { p.Record(&b, t0+2*sec, probe, Success); return b.State() }())

	// A lost probe that reports a success late still counts as one.
	p = mustNew(t, Config{ConsecutiveFailures: 1, OpenTimeout: time.Second, HalfOpenProbes: 2})
	b = Breaker{}
	tk, _, _ = p.Allow(&b, t0)
	p.Record(&b, t0, tk, Failure)
	l1, _, _ := p.Allow(&b, t0+sec)
	_, _, _ = p.Allow(&b, t0+sec)
	p1, _, err := p.Allow(&b, t0+2*sec)
	require.NoError(t, err)
	p.Record(&b, t0+2*sec, l1, Success)
	_, _, err = p.Allow(&b, t0+2*sec)
	require.ErrorIs(t, err, ErrProbeLimit, "p1 is out and l1 used the other slot")
	p.Record(&b, t0+2*sec, p1, Success)
	require.Equal(t, Closed, b.State())
}

func TestClockBackwardsCountsAsNow(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Window: 10 * time.Second, Buckets: 5, MinRequests: 4, FailureRate: 0.5, ConsecutiveFailures: -1})
	var b Breaker
	at := t0 + 60*sec
	for range 3 {
		tk, _, _ := p.Allow(&b, at)
		p.Record(&b, at, tk, Success)
	}
	// The clock steps back 9 s: the failure still lands in the current
	// bucket, next to the successes, instead of wiping one of them.
	back := at - 9*sec
	tk, _, _ := p.Allow(&b, back)
	p.Record(&b, back, tk, Failure)
	c := p.Counts(&b)
	require.Equal(t, 4, c.Requests)
	require.Equal(t, 1, c.Failures)
	// Two more failures, still "in the past", trip on 3 of 6.
	tk, _, _ = p.Allow(&b, back)
	require.False(t, p.Record(&b, back, tk, Failure).Changed())
	tk, _, _ = p.Allow(&b, back-sec)
	ev := p.Record(&b, back-sec, tk, Failure)
	require.Equal(t, Closed, ev.From)
	require.Equal(t, Open, ev.To)
	require.Equal(t, Counts{Requests: 6, Failures: 3, Consecutive: 3}, ev.Counts)
}

func TestOutcomesOfAnEarlierGenerationAreIgnored(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 2, OpenTimeout: time.Second, HalfOpenProbes: 1})
	var b Breaker
	var old [4]Ticket
	old[0], _, _ = p.Allow(&b, t0)
	p.Record(&b, t0, old[0], Failure)
	// Sent after the first failure was seen: each failure counts in the
	// run (calls in flight together would be one failure of it).
	for i := 1; i < len(old); i++ {
		old[i], _, _ = p.Allow(&b, t0)
	}
	require.Equal(t, Open, p.Record(&b, t0, old[1], Failure).To)
	probe, _, err := p.Allow(&b, t0+sec)
	require.NoError(t, err)
	require.Equal(t, Closed, p.Record(&b, t0+sec, probe, Success).To)
	// Calls sent before the breaker opened report late: that trouble was
	// acted on already and must not trip the fresh closed breaker.
	require.False(t, p.Record(&b, t0+sec, old[2], Failure).Changed())
	require.False(t, p.Record(&b, t0+sec, old[3], Failure).Changed())
	require.Equal(t, Closed, b.State())
	require.Zero(t, p.Counts(&b).Consecutive)
}

func TestLocked(t *testing.T) {
	t.Parallel()
	var (
		mu     sync.Mutex
		events []Event
	)
	l := NewLocked(mustNew(t, Config{ConsecutiveFailures: 50, MinRequests: 1000, OpenTimeout: time.Second, HalfOpenProbes: 2}), func(e Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				tk, err := l.Allow(t0)
				if err == nil {
					l.Done(t0, tk, Failure)
				}
			}
		})
	}
	wg.Wait()
	st, c := l.State()
	require.Equal(t, Open, st)
	require.Zero(t, c.Consecutive)
	require.Len(t, events, 1, "one trip, however many goroutines saw it")
	require.Equal(t, ReasonConsecutiveFailures, events[0].Reason)
	require.Equal(t, 50, events[0].Counts.Consecutive)
	until, open := l.OpenUntil()
	require.True(t, open)
	require.Equal(t, t0+sec, until)
	_, err := l.Allow(t0 + 999*ms)
	require.ErrorIs(t, err, ErrOpen)
}

func TestHotPathDoesNotAllocate(t *testing.T) {
	l := NewLocked(mustNew(t, Config{}), nil)
	now := t0
	allocs := testing.AllocsPerRun(1000, func() {
		now += ms
		tk, err := l.Allow(now)
		if err == nil {
			l.Done(now, tk, Success)
		}
	})
	require.Zero(t, allocs)
}

func TestFresh(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Window: 10 * time.Second, Buckets: 10, ConsecutiveFailures: 2, OpenTimeout: time.Second, HalfOpenProbes: 1})
	var b Breaker
	require.True(t, p.Fresh(&b, t0))
	tk, _, _ := p.Allow(&b, t0)
	p.Record(&b, t0, tk, Failure)
	require.False(t, p.Fresh(&b, t0+9*sec), "a failure still in the window")
	require.True(t, p.Fresh(&b, t0+10*sec))
	// Dropping it then lost nothing: the old failure no longer counts.
	tk, _, _ = p.Allow(&b, t0+10*sec)
	p.Record(&b, t0+10*sec, tk, Failure)
	require.Equal(t, Closed, b.State())
	tk, _, _ = p.Allow(&b, t0+10*sec)
	p.Record(&b, t0+10*sec, tk, Failure) // two in a row: trips
	require.Equal(t, Open, b.State())
	require.False(t, p.Fresh(&b, t0+time.Hour.Microseconds()), "open (or half-open) is never fresh")
}

// TestSeedOverloadOpensWithinFiveSeconds is seed 001's success metric with
// the default Config: at 10 calls a second, an overload opens the breaker
// within 5 s, whether it fails every call or 60% of them in a pattern that
// never reaches 10 in a row; once the provider is well again, it closes by
// itself.
func TestSeedOverloadOpensWithinFiveSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func(i int) bool
	}{
		{"every call fails", func(int) bool { return true }},
		{"60% fail, never 10 in a row", func(i int) bool { return i%5 < 3 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := mustNew(t, Config{})
			var b Breaker
			var opened int64
			now := t0
			for i := 0; opened == 0 && now < t0+5*sec; i++ {
				now += 100 * ms
				tk, _, err := p.Allow(&b, now)
				require.NoError(t, err)
				o := Success
				if tc.fail(i) {
					o = Failure
				}
				if ev := p.Record(&b, now, tk, o); ev.To == Open {
					opened = now
				}
			}
			require.NotZero(t, opened, "still %v after 5 s of overload", b.State())
			// Well again: after the open timeout the probes succeed.
			for now < opened+30*sec && b.State() != Closed {
				now += 100 * ms
				if tk, _, err := p.Allow(&b, now); err == nil {
					p.Record(&b, now, tk, Success)
				}
			}
			require.Equal(t, Closed, b.State())
			require.LessOrEqual(t, now-opened, DefaultOpenTimeout.Microseconds()+sec)
		})
	}
}

func TestFailuresInFlightTogetherAreOneOfTheRun(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 3, MinRequests: 1000})
	var b Breaker
	// Eight calls in flight at once all fail (a limit that fell refuses
	// every one): one failure of the run, eight of the window.
	var burst [8]Ticket
	for i := range burst {
		burst[i], _, _ = p.Allow(&b, t0)
	}
	for _, tk := range burst {
		require.False(t, p.Record(&b, t0+ms, tk, Failure).Changed())
	}
	c := p.Counts(&b)
	require.Equal(t, 1, c.Consecutive)
	require.Equal(t, 8, c.Failures)
	// Calls sent after a failure was seen, one at a time, lengthen it.
	tk, _, _ := p.Allow(&b, t0+2*ms)
	require.False(t, p.Record(&b, t0+3*ms, tk, Failure).Changed())
	require.Equal(t, 2, p.Counts(&b).Consecutive)
	tk, _, _ = p.Allow(&b, t0+4*ms)
	ev := p.Record(&b, t0+5*ms, tk, Failure)
	require.Equal(t, Open, ev.To)
	require.Equal(t, ReasonConsecutiveFailures, ev.Reason)
	require.Equal(t, 3, ev.Counts.Consecutive)
}

func TestFailuresInFlightStillCountInTheRate(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 3, MinRequests: 10, FailureRate: 0.5})
	var b Breaker
	var burst [10]Ticket
	for i := range burst {
		burst[i], _, _ = p.Allow(&b, t0)
	}
	for i, tk := range burst[:9] {
		require.False(t, p.Record(&b, t0+ms, tk, Failure).Changed(), "failure %d", i)
	}
	ev := p.Record(&b, t0+ms, burst[9], Failure)
	require.Equal(t, Open, ev.To)
	require.Equal(t, ReasonFailureRate, ev.Reason)
}

// oneAfterAnother returns a function that admits one call a millisecond
// after the last (*at moves on) and records its outcome o at once: each
// call sent after the one before it was seen.
func oneAfterAnother(t *testing.T, p *Policy, b *Breaker, at *int64) func(o Outcome) Event {
	t.Helper()
	return func(o Outcome) Event {
		*at += ms
		tk, _, err := p.Allow(b, *at)
		require.NoError(t, err)
		return p.Record(b, *at, tk, o)
	}
}

func TestThrottlesCountInTheRateNotInTheRun(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{ConsecutiveFailures: 3, MinRequests: 8, FailureRate: 0.5, OpenTimeout: time.Second, HalfOpenProbes: 1})
	var b Breaker
	at := t0
	one := oneAfterAnother(t, p, &b, &at)
	// A success, failures, then throttles, each sent after the last was
	// seen: the throttles neither lengthen the run nor end it.
	require.False(t, one(Success).Changed())
	require.False(t, one(Failure).Changed())
	require.False(t, one(Failure).Changed())
	for range 3 {
		require.False(t, one(Throttle).Changed())
	}
	c := p.Counts(&b)
	require.Equal(t, 2, c.Consecutive)
	require.Equal(t, 5, c.Failures)
	require.Equal(t, 6, c.Requests)
	ev := one(Failure)
	require.Equal(t, ReasonConsecutiveFailures, ev.Reason)

	// Throttles alone trip the failure rate.
	b = Breaker{}
	for range 4 {
		require.False(t, one(Success).Changed())
	}
	for range 3 {
		require.False(t, one(Throttle).Changed())
	}
	ev = one(Throttle)
	require.Equal(t, Open, ev.To)
	require.Equal(t, ReasonFailureRate, ev.Reason)

	// A throttled probe fails.
	at += sec
	tk, _, err := p.Allow(&b, at)
	require.NoError(t, err)
	require.True(t, tk.Probe)
	ev = p.Record(&b, at, tk, Throttle)
	require.Equal(t, ReasonProbeFailed, ev.Reason)
}

// A provider that refuses everything is down, whatever status it picks:
// throttles with no success in the window, or none ever, run like failures.
func TestThrottlesWithNoSuccessAreARun(t *testing.T) {
	t.Parallel()
	p := mustNew(t, Config{Window: 10 * time.Second, Buckets: 10, ConsecutiveFailures: 3, MinRequests: 1000})
	var b Breaker
	at := t0
	one := oneAfterAnother(t, p, &b, &at)
	// Never a success: the third throttle opens it.
	require.False(t, one(Throttle).Changed())
	require.False(t, one(Throttle).Changed())
	ev := one(Throttle)
	require.Equal(t, Open, ev.To)
	require.Equal(t, ReasonConsecutiveFailures, ev.Reason)

	// A success, then throttles within the window: no run.
	b = Breaker{}
	require.False(t, one(Success).Changed())
	for range 5 {
		require.False(t, one(Throttle).Changed())
	}
	require.Zero(t, p.Counts(&b).Consecutive)
	// Once the window has passed with no success, they run again.
	at += 10 * sec
	require.False(t, one(Throttle).Changed())
	require.False(t, one(Throttle).Changed())
	ev = one(Throttle)
	require.Equal(t, ReasonConsecutiveFailures, ev.Reason)
}
