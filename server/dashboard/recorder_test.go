package dashboard

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/limiter"
	"github.com/sluicerl/sluice/store"
)

var t0 = time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)

func dec(policy string, allowed, shadow bool, remaining, limit int64) limiter.Decision {
	return limiter.Decision{Policy: policy, Allowed: allowed, Shadowed: shadow, Remaining: remaining, Limit: limit}
}

func totals(pts []Point) (a, d, s, o int64) {
	for _, p := range pts {
		a, d, s, o = a+p.Allowed, d+p.Denied, s+p.ShadowDenied, o+p.Outage
	}
	return
}

// Steps at given times; the hour's totals after each.
func TestRecorderSeriesSteps(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	steps := []struct {
		advance         time.Duration
		allowed, shadow bool
		granted         bool
		fallback        bool
		wantA, wantD    int64
		wantS, wantO    int64
	}{
		{0, true, false, true, false, 1, 0, 0, 0},
		{time.Second, false, false, false, false, 1, 1, 0, 0},
		{time.Second, true, false, false, false, 1, 2, 0, 0}, // an item of a refused all-or-nothing take
		{time.Second, true, true, true, false, 1, 2, 1, 0},
		{time.Second, true, false, true, true, 2, 2, 1, 1}, // fail_open answer
		{30 * time.Minute, true, false, true, false, 3, 2, 1, 1},
		// 11:00:04: the minute of the first five (10:00) has left the
		// hour's 60 one-minute steps (10:01 .. 11:00).
		{30 * time.Minute, true, false, true, false, 2, 0, 0, 0},
		{time.Hour, true, false, true, false, 1, 0, 0, 0},
	}
	for i, st := range steps {
		clk.Advance(st.advance)
		d := dec("p", st.allowed, st.shadow, 5, 10)
		if st.fallback {
			d.Fallback, d.FallbackMode = store.FallbackStoreDown, store.FailOpen
		}
		r.ObserveDecision("k", d, st.granted)
		a, de, s, o := totals(r.Series("p", time.Hour, time.Minute))
		require.Equal(t, [4]int64{st.wantA, st.wantD, st.wantS, st.wantO}, [4]int64{a, de, s, o}, "step %d", i)
	}
	require.Len(t, r.Series("p", time.Hour, time.Minute), 60)
	require.Len(t, r.Series("p", 5*time.Minute, BucketWidth), 30)
	require.Len(t, r.Series("nope", time.Hour, time.Minute), 60, "an unknown policy has an all-zero series")
}

// A bucket slot reused an hour later starts from zero.
func TestRecorderBucketReuse(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	for range 5 {
		r.ObserveDecision("k", dec("p", true, false, 9, 10), true)
	}
	clk.Advance(Buckets * BucketWidth) // same slot, next hour
	r.ObserveDecision("k", dec("p", false, false, 0, 10), false)
	a, d, _, _ := totals(r.Series("p", time.Hour, BucketWidth))
	require.Equal(t, int64(0), a)
	require.Equal(t, int64(1), d)
}

// The sketch keeps TopKeys keys; a key far hotter than the rest is first
// and its count bounds hold.
func TestRecorderHottest(t *testing.T) {
	t.Parallel()
	r := NewRecorder(clocktest.New(t0))
	for i := range 1000 {
		r.ObserveDecision(fmt.Sprintf("cold-%d", i), dec("p", true, false, 9, 10), true)
		if i%2 == 0 {
			r.ObserveDecision("hot", dec("p", true, false, 9, 10), true)
		}
	}
	hot := r.Hottest("p", 100)
	require.Len(t, hot, TopKeys)
	require.Equal(t, "hot", hot[0].Key)
	require.GreaterOrEqual(t, hot[0].Count, int64(500))
	require.LessOrEqual(t, hot[0].Count-hot[0].Error, int64(500))
	require.Len(t, r.Hottest("p", 3), 3)
	require.Nil(t, r.Hottest("nope", 3))
}

func TestRecorderNearest(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	r.ObserveDecision("roomy", dec("p", true, false, 90, 100), true) // not near: not remembered
	r.ObserveDecision("half", dec("p", true, false, 50, 100), true)
	r.ObserveDecision("empty", dec("p", false, false, 0, 100), false)
	r.ObserveDecision("low", dec("p", true, false, 10, 100), true)
	got := r.Nearest("p", 10, time.Minute)
	require.Equal(t, []string{"empty", "low", "half"}, keysOf(got))
	// A remembered key stays current, even once it has room again.
	r.ObserveDecision("empty", dec("p", true, false, 80, 100), true)
	require.Equal(t, []string{"low", "half", "empty"}, keysOf(r.Nearest("p", 10, time.Minute)))
	require.Equal(t, []string{"low"}, keysOf(r.Nearest("p", 1, time.Minute)))
	clk.Advance(2 * time.Minute)
	require.Empty(t, r.Nearest("p", 10, time.Minute), "stale entries are not shown")
	// Full: a new key nearer its limit replaces the farthest one.
	for i := range NearKeys {
		r.ObserveDecision(fmt.Sprintf("k%d", i), dec("p", true, false, 40, 100), true)
	}
	r.ObserveDecision("nearest", dec("p", true, false, 1, 100), true)
	got = r.Nearest("p", 1, time.Minute)
	require.Equal(t, "nearest", got[0].Key)
	// Limits up to 2^53 compare without overflowing.
	r2 := NewRecorder(clk)
	r2.ObserveDecision("big", dec("q", true, false, 1<<51, 1<<53), true) // a quarter left
	r2.ObserveDecision("small", dec("q", true, false, 1, 10), true)      // a tenth left
	require.Equal(t, []string{"small", "big"}, keysOf(r2.Nearest("q", 10, time.Minute)))
}

func keysOf(ks []NearKey) []string {
	out := []string{}
	for _, k := range ks {
		out = append(out, k.Key)
	}
	return out
}

func TestRecorderRecent(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	for i := range RecentDecisions + 10 {
		clk.Advance(time.Millisecond)
		key := "other"
		if i%10 == 0 {
			key = "k"
		}
		r.ObserveDecision(key, dec("p", true, false, int64(i), 1000), true)
	}
	got := r.Recent("p", "k", 100)
	// Only the latest RecentDecisions are kept: i = 10..265, so k's are 10, 20, ..., 260.
	require.Len(t, got, 26)
	require.Equal(t, int64(260), got[0].Remaining, "newest first")
	require.Equal(t, int64(10), got[len(got)-1].Remaining)
	require.Len(t, r.Recent("p", "k", 3), 3)
	last, ok := r.Last("p")
	require.True(t, ok)
	require.Equal(t, int64(RecentDecisions+9), last.Remaining)
}

func TestRecorderLeasesAndConfigsBounded(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	for i := range MaxLeaseKeys + 5 {
		clk.Advance(time.Second)
		r.ObserveLease("conc", fmt.Sprintf("k%d", i), "h", true)
	}
	ks := r.LeaseKeys()
	require.Len(t, ks, MaxLeaseKeys)
	require.Equal(t, fmt.Sprintf("k%d", MaxLeaseKeys+4), ks[0].Key, "most recent first")
	r.ObserveLease("conc", "busy", "a", true)
	r.ObserveLease("conc", "busy", "b", false)
	r.ObserveLease("conc", "busy", "b", false)
	require.Equal(t, 2, r.LeaseKeys()[0].Refused)
	clk.Advance(leaseWindow + time.Second)
	require.Equal(t, 0, r.LeaseKeys()[0].Refused, "refusals older than the window do not count")

	for i := range MaxSlotConfigs + 3 {
		r.ObserveSlotConfig(fmt.Sprintf("c%d", i))
	}
	r.ObserveSlotConfig("c10")
	cs := r.SlotConfigs()
	require.Len(t, cs, MaxSlotConfigs)
	require.Equal(t, "c10", cs[0])
}

// Waiters are the holders refused and not granted since, each once however
// often it asks again, until granted or WaitWindow passes without an ask.
func TestRecorderWaiters(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	waiting := func() []Waiter { return r.LeaseKeys()[0].Waiting }
	r.ObserveLease("conc", "k", "a", true)
	require.Empty(t, waiting())
	r.ObserveLease("conc", "k", "b", false)
	clk.Advance(time.Second)
	r.ObserveLease("conc", "k", "c", false)
	r.ObserveLease("conc", "k", "b", false) // b asks again: still one waiter, since its first ask
	require.Equal(t, []Waiter{{HolderHash: holderHash("b"), Since: t0}, {HolderHash: holderHash("c"), Since: t0.Add(time.Second)}}, waiting())
	r.ObserveLease("conc", "k", "b", true) // granted: no longer waiting
	require.Equal(t, []Waiter{{HolderHash: holderHash("c"), Since: t0.Add(time.Second)}}, waiting())
	clk.Advance(WaitWindow + time.Second) // c gave up
	require.Empty(t, waiting())
	for i := range MaxWaiters + 10 {
		r.ObserveLease("conc", "k", fmt.Sprintf("w%d", i), false)
	}
	require.Len(t, waiting(), MaxWaiters, "bounded")
}

func TestNiceCeil(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.5, 2}, {3, 5}, {7, 10}, {10, 10}, {11, 20}, {260, 500}, {999, 1000}} {
		require.Equal(t, c.want, niceCeil(c.in), "niceCeil(%v)", c.in)
	}
}

// The near keys kept with the cached farthest entry are those a full scan
// on every decision keeps (the recorder before the cache): a differential
// test over random decisions, the clock moving on each, so ties of
// remaining break by age alone.
func TestRecorderNearMatchesScan(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(t0)
	r := NewRecorder(clk)
	type seen struct {
		ratio float64
		at    time.Time
	}
	ref := map[string]seen{}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		clk.Advance(time.Millisecond)
		key := fmt.Sprintf("k%d", rng.IntN(200))
		rem := rng.Int64N(101)
		r.ObserveDecision(key, limiter.Decision{Policy: "p", Allowed: true, Limit: 100, Remaining: rem}, true)
		e := seen{float64(rem) / 100, clk.Now()}
		if _, ok := ref[key]; ok {
			ref[key] = e
		} else if e.ratio <= nearRatio {
			if len(ref) < NearKeys {
				ref[key] = e
			} else {
				worst, wr, wat := "", -1.0, time.Time{}
				for k, v := range ref {
					if v.ratio > wr || (v.ratio == wr && v.at.Before(wat)) {
						worst, wr, wat = k, v.ratio, v.at
					}
				}
				if e.ratio <= wr {
					delete(ref, worst)
					ref[key] = e
				}
			}
		}
		if i%97 == 0 || i == 19999 {
			got := map[string]bool{}
			for _, k := range r.Nearest("p", NearKeys, time.Hour) {
				got[k.Key] = true
			}
			want := map[string]bool{}
			for k := range ref {
				want[k] = true
			}
			require.Equal(t, want, got, "after %d decisions", i+1)
		}
	}
}
