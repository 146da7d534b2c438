package aimd

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deepBucket is a token bucket of burst tokens refilled at limit a
// second, which refuses a call it has no token for with a Retry-After of
// a whole second, as issue 18's external providers did.
type deepBucket struct {
	limit, burst, tokens float64
	last                 int64
}

func (p *deepBucket) serve(now int64) bool {
	if p.last != 0 {
		p.tokens = min(p.burst, p.tokens+p.limit*float64(now-p.last)/float64(s1))
	}
	p.last = now
	if p.tokens < 1 {
		return false
	}
	p.tokens--
	return true
}

// runDeepBucket sends one key's calls, one at a time at the controller's rate,
// to p for d µs from *at, answered in 5 ms, and returns when each refusal
// came (µs).
func runDeepBucket(c *Controller, s *State, p *deepBucket, at *int64, d int64) []int64 {
	return runDeepBucketIn(c, s, p, at, d, 5*ms)
}

// runDeepBucketIn is runDeepBucket with answers in lat µs.
func runDeepBucketIn(c *Controller, s *State, p *deepBucket, at *int64, d, lat int64) []int64 {
	var refused []int64
	for end := *at + d; *at < end; {
		if until, paused := s.Paused(*at); paused {
			*at = until
			continue
		}
		sent := *at
		*at += lat
		if p.serve(sent) {
			c.Observe(s, *at, ok(lat))
		} else {
			refused = append(refused, *at)
			c.Observe(s, *at, Sample{Outcome: Throttled, Latency: lat, RetryAfter: s1})
		}
		*at = max(*at, sent+int64(float64(s1)/c.Rate(s)))
	}
	return refused
}

// Issue 18: providers whose bucket holds a second of their limit let a
// rate over it pass for seconds after every pause, and each refusal,
// answered by resuming at the plateau under the rate refused, stepped the
// fleet down by 0.91 an episode: refused every 4-7 s for 30 s, and banned
// by a provider that bans after 5 refusals in 10 s. The calls served from
// one refusal to the next are the provider's rate: the key resumes under
// it, and is refused no more.
func TestABucketOfSecondsIsReadFromTheCallsServedBetweenRefusals(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 150, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8,
		Cooldown: 500 * time.Millisecond, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	p := &deepBucket{limit: 100, burst: 100, tokens: 100}
	at := t0
	refused := runDeepBucket(c, &s, p, &at, 25*s1)
	require.NotEmpty(t, refused)
	for i := range refused {
		n := 0
		for _, r := range refused[i:] {
			if r-refused[i] < 10*s1 {
				n++
			}
		}
		require.Less(t, n, 4, "refusals in the 10 s from %.1f s: %v", float64(refused[i]-t0)/float64(s1), refused)
	}
	require.Less(t, refused[len(refused)-1]-t0, 20*s1, "still refused after 20 s: %v", refused)
	require.InDelta(t, 97, c.Rate(&s), 4, "the rate the provider served")
	require.Empty(t, runDeepBucket(c, &s, p, &at, 5*s1), "refused at the rate resumed")
}

// The calls served between two episodes are read only when they say the
// provider's rate: at a rate that held since the last decrease, after a
// run of cycleRun from the pause, within excuseSpan of the last episode,
// and under the plateau of the rate refused but not under half of it; not
// at or under the rate a held refusal left (State.excused), which the
// provider let pass before.
func TestCycleRateReadsOnlyASteadyRun(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 130, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91})
	for _, tc := range []struct {
		name string
		edit func(s *State, sent, prevPause *int64)
		want float64
	}{
		{"a steady run", func(*State, *int64, *int64) {}, 100},
		{"a rate that grew back since the cut", func(s *State, _, _ *int64) { s.cutTo = 100 }, 0},
		{"a run shorter than cycleRun", func(_ *State, sent, prevPause *int64) { *prevPause = *sent - cycleRun + 1 }, 0},
		{"no episode within excuseSpan", func(s *State, sent, _ *int64) { s.refusedAt = *sent - excuseSpan - 1; s.cycOK = 1100 }, 0},
		{"a rate served near the one refused", func(s *State, _, _ *int64) { s.cycOK = 620 }, 0},
		{"under half the rate refused", func(s *State, _, _ *int64) { s.cycOK = 300 }, 0},
		{"in a slow start", func(s *State, _, _ *int64) { s.probing = true }, 0},
		{"at a rate under a held refusal's", func(s *State, _, _ *int64) { s.excused = 140 }, 0},
		{"at a rate over a held refusal's", func(s *State, _, _ *int64) { s.excused = 120 }, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := c.Init()
			s.probing = false
			s.rate, s.cutTo = 130, 128
			sent := t0 + 6*s1
			s.refusedAt, s.cycOK = t0+s1, 500 // 500 served in 5 s
			prevPause := t0 + 2*s1
			tc.edit(&s, &sent, &prevPause)
			require.InDelta(t, tc.want, c.cycleRate(&s, sent, prevPause), 1e-9)
		})
	}
}

// slowStartIntoASecond returns a key in slow start from 10/s and a
// provider at 100/s whose bucket holds a second of it, full, at t0.
func slowStartIntoASecond(t *testing.T) (*Controller, State, *deepBucket, int64) {
	t.Helper()
	c := mustNew(t, Config{Start: 10, SlowStart: 2, IgnoreLatency: true, Decrease: 0.8,
		Cooldown: 500 * time.Millisecond, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
	return c, c.Init(), &deepBucket{limit: 100, burst: 100, tokens: 100}, t0
}

// Issue 18, a bucket of a second at 100/s as OS processes: the slow start
// ended at four times the limit, and the two refusals chained after it,
// each cut by 0.64, came at 2.8 and 2.2 times it; the fourth episode was a
// provider's fifth refusal in 10 s, and a ban. Each episode read 100/s
// from the calls served since the one before: two that agree are the
// provider's rate, and the key resumes under it.
func TestTwoEpisodesThatReadTheSameRateResumeUnderIt(t *testing.T) {
	t.Parallel()
	c, s, p, at := slowStartIntoASecond(t)
	refused := runDeepBucketIn(c, &s, p, &at, 30*s1, ms)
	require.GreaterOrEqual(t, len(refused), 3, "the slow start's end and two refusals chained after it: %v", refused)
	require.Len(t, refused, 3, "refused after the third episode: %v", refused)
	require.InDelta(t, 98, c.Rate(&s), 2, "the rate the two episodes read")
}

// Two episodes' reads agree only for a bucket that refilled in full: at a
// bucket smaller than a pause's refill, runs at different rates read
// different rates, and the lower one is no limit; at the same rate they
// read alike whatever the bucket.
func TestAgreedRateNeedsTwoReadsAlike(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 130, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91})
	for _, tc := range []struct {
		name  string
		edit  func(s *State, sent *int64)
		heard bool
		want  float64
	}{
		{"two reads alike", func(*State, *int64) {}, false, 95},
		{"the lower of the two", func(s *State, _ *int64) { s.cycEst = 92 }, false, 92},
		{"no read before", func(s *State, _ *int64) { s.cycEst = 0 }, false, 0},
		{"reads apart (a small bucket's)", func(s *State, _ *int64) { s.cycEst = 60 }, false, 0},
		{"no episode within excuseSpan", func(s *State, sent *int64) { s.refusedAt = *sent - excuseSpan - 1 }, false, 0},
		{"under agreeFloor of the rate refused", func(s *State, _ *int64) { s.rate = 400; s.cycFrom = 600 }, false, 0},
		{"at the rate the last episode refused", func(s *State, _ *int64) { s.cycFrom = 140 }, false, 0},
		// Another process's refusal, heard of after a short pause: the
		// calls served are the key's share of a floor.
		{"this refusal heard of after a short pause", func(*State, *int64) {}, true, 0},
		{"the last read's refusal heard of after one", func(s *State, _ *int64) { s.cycHeard = true }, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := c.Init()
			s.probing = false
			s.rate, s.cycEst, s.cycFrom = 130, 97, 170
			sent := t0 + 3*s1
			s.refusedAt, s.cycOK = t0+s1, 190 // 190 served in 2 s
			tc.edit(&s, &sent)
			require.InDelta(t, tc.want, c.agreedRate(&s, sent, tc.heard), 1e-9)
		})
	}
}

// Only a refusal chained soon after its pause keeps its read for the next
// (State.cycEst): a refusal after a long run reads a small bucket's floor
// (issue 18, a saturated machine: 0.80 and 0.88 of the limit over runs of
// 3.5 and 6.3 s read alike, and the fleet held 76/s of 100).
func TestOnlyAChainedRefusalKeepsItsRead(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 130, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8,
		Cooldown: 500 * time.Millisecond, Plateau: 0.91, Hold: 10 * time.Second, UsageMultiple: -1})
	s := c.Init()
	s.probing = false
	s.rate, s.refusedAt, s.lastDecrease, s.pausedUntil, s.cycOK = 130, t0, t0, t0+s1, 450
	refuse := func(now int64) {
		d := c.Observe(&s, now, Sample{Outcome: Throttled, Latency: 5 * ms, RetryAfter: s1})
		require.Equal(t, Decreased, d.Change)
	}
	refuse(t0 + 5*s1) // 4 s after its pause: 450 served in 5 s, 90/s
	require.Zero(t, s.cycEst, "read after a long run")
	s.cycOK = 60
	refuse(s.pausedUntil + 500*ms) // chained: 60 served in 1.5 s
	require.InDelta(t, 40, s.cycEst, 1, "read by a chained refusal")
	require.False(t, s.cycHeard, "the key's own refusal")

	// Another process's chained refusals, heard of from the store (as
	// outbound tells it: Failed, no latency): after a pause of a second
	// the key's share is its share of the limit; after one of 150 ms,
	// its share of a floor, kept as such (heardRead).
	heard := func(now, pause int64) {
		s.cycOK = 60
		d := c.Observe(&s, now, Sample{Outcome: Failed, NoLatency: true, RetryAfter: pause})
		require.Equal(t, Decreased, d.Change)
		require.Positive(t, s.cycEst, "read by a chained refusal heard of")
	}
	heard(s.pausedUntil+500*ms, 150*ms)
	require.False(t, s.cycHeard, "heard of after a pause of a second")
	heard(s.pausedUntil+200*ms, s1)
	require.True(t, s.cycHeard, "heard of after a pause of 150 ms")
}

// Issue 18, a bucket of a second at 100/s as OS processes answering in
// 5 ms: the refusals in flight at a slow start's end (four times the
// limit) and at the refusal chained after it brought a ban, and the ramp
// after the ban levelled off under the rate banned at, 2.6 times the
// limit, which the bucket let pass until a second ban. The chained
// refusal read the provider's rate from the calls served since the slow
// start's end (State.cycEst): the ramp after the ban levels off under that
// (and not, as before, at 1.76 times the limit, refused 20 s after the
// ban ended and twice more in 6 s).
func TestTheRampAfterABanLevelsUnderTheChainedRead(t *testing.T) {
	t.Parallel()
	c, s, p, at := slowStartIntoASecond(t)
	var refused []int64
	for len(refused) < 2 {
		refused = append(refused, runDeepBucketIn(c, &s, p, &at, 10*ms, ms)...)
		require.Less(t, at, t0+30*s1, "no chained refusal in 30 s: %v", refused)
	}
	require.Greater(t, c.Rate(&s), 150.0, "banned over the limit")
	require.InDelta(t, 100, s.cycEst, 10, "the chained refusal's read")
	ban := 2 * s1
	c.Observe(&s, at, Sample{Outcome: Throttled, Latency: ms, RetryAfter: ban, Banned: true})
	at += ban
	// The level holds Hold from about 16 s: a probe above it may
	// come from 26 s.
	end := at + 25*s1
	peak := 0.0
	for at < end {
		after := runDeepBucketIn(c, &s, p, &at, 100*ms, ms)
		require.Empty(t, after, "refused %.1f s after the ban ended", float64(at-end+25*s1)/float64(s1))
		peak = max(peak, c.Rate(&s))
	}
	require.LessOrEqual(t, peak, 100.0, "the ramp after the ban")
	require.Greater(t, peak, 80.0, "and it ramped")
}

// A ban bounds the ramp after it by a chained refusal's read only when the
// read is recent (within excuseSpan), under the rate banned at, and not a
// pause-only span's (agreeFloor of that rate or more).
func TestTheBanRateTakesOnlyARecentChainedRead(t *testing.T) {
	t.Parallel()
	c := mustNew(t, Config{Start: 10, SlowStart: -1, IgnoreLatency: true, Decrease: 0.8, Plateau: 0.91})
	for _, tc := range []struct {
		name string
		edit func(s *State, now *int64)
		want float64
	}{
		{"a chained read", func(*State, *int64) {}, 100},
		{"no read", func(s *State, _ *int64) { s.cycEst = 0 }, 200},
		{"a read over the rate banned at", func(s *State, _ *int64) { s.cycEst = 250 }, 200},
		{"a pause-only span's read", func(s *State, _ *int64) { s.cycEst = 40 }, 200},
		{"a read older than excuseSpan", func(s *State, now *int64) { *now = s.refusedAt + excuseSpan + 1 }, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := c.Init()
			s.probing = false
			s.rate, s.cycEst, s.refusedAt = 200, 100, t0
			now := t0 + s1
			tc.edit(&s, &now)
			c.restart(&s, now, 2*s1)
			require.InDelta(t, tc.want, s.banRate, 1e-9)
		})
	}
}
