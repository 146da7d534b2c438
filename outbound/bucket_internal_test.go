package outbound

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/signal"
)

// bucketRun drives one leakyBucket as a fleet's pace against a simulated
// leaky bucket of size calls, leaking from, then to calls a second after
// half of secs seconds, answering after lat µs, in steps of a millisecond.
// The fleet sends at the bucket's pace, never in a stop, and pauses 2 s
// after a refusal; until idleTill (µs) it has only a call every 100 ms to
// send (the pace never holds one back). It returns the calls served and refused after the
// first skip seconds, and the fullest and emptiest level then.
func bucketRun(size int64, from, to, start float64, secs, skip int, lat, idleTill int64) (served, refused int, hi, lo float64) {
	var b leakyBucket
	level, next, pauseTill := 0.0, int64(0), int64(-1)
	type answer struct {
		at, sent, used int64
		refused        bool
	}
	var flight []answer
	lo = math.Inf(1)
	const step = int64(1000)
	for now := int64(0); now < int64(secs)*1e6; now += step {
		leak := from
		if now >= int64(secs)*1e6/2 {
			leak = to
		}
		level = max(0, level-leak*float64(step)/1e6)
		for len(flight) > 0 && flight[0].at <= now {
			a := flight[0]
			flight = flight[1:]
			var rep signal.Report
			rep.Throttled = a.refused
			rep.NPolicies = 1
			rep.Policies[0] = signal.Policy{Source: signal.SourceShopifyREST, Known: signal.FieldLimit | signal.FieldUsed | signal.FieldRemaining,
				Limit: size, Used: a.used, Remaining: size - a.used}
			b.observe(&rep, a.sent, start)
			if a.refused && now >= pauseTill {
				pauseTill = now + 2e6
				b.quiet(pauseTill, float64(size))
			}
		}
		rate, stop := b.pace(now, lat)
		if !b.active() {
			rate = start
		}
		if now < idleTill {
			next = max(next, now/100_000*100_000)
			if now%100_000 != 0 {
				continue
			}
		} else if now >= pauseTill && now >= stop && now < next {
			b.waited = now // calls held back by the pace
		}
		if now < pauseTill || now < stop || now < next {
			continue
		}
		steady := now >= int64(skip)*1e6
		a := answer{at: now + lat, sent: now}
		if level+1 > float64(size) {
			a.refused = true
			if steady {
				refused++
			}
		} else {
			level++
			if steady {
				served++
			}
		}
		a.used = min(size, int64(math.Ceil(level-1e-9)))
		flight = append(flight, a)
		next = now + int64(1e6/rate)
		if steady {
			hi, lo = max(hi, level), min(lo, level)
		}
	}
	return served, refused, hi, lo
}

// A bucket that reports its level but not its leak is served at its leak,
// and never filled, when the leak halves or doubles, from 2 to 100 calls
// a second: the level stays between empty and full.
func TestLeakyBucketPacesAtTheLeak(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		from, to, start float64
	}{
		{"halving", 100, 50, 2},
		{"doubling", 50, 100, 2},
		{"shopify standard", 2, 2, 1},
		{"shopify standard halving", 2, 1, 10},
		{"shopify plus", 4, 4, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			served, refused, hi, lo := bucketRun(40, tc.from, tc.to, tc.start, 30, 5, 20_000, 0)
			require.Zero(t, refused)
			require.Less(t, hi, 38.0, "the level stays clear of full")
			require.Greater(t, lo, 0.0, "the level never empties: the fleet is served at the leak")
			// Seconds 5-15 and 15-30, give or take what the level
			// fell by between the two (a slow bucket is still
			// settling at 5 s).
			want := 10*tc.from + 15*tc.to
			require.InDelta(t, want, float64(served), 0.05*want+10)
		})
	}
}

// A key whose adapted rate, where the leak's estimate starts, was far
// above the leak is refused a few times, not after every pause: a stop or
// a pause that drained the bucket less than the estimate said cuts it to
// what was measured.
func TestLeakyBucketOverestimateRecovers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		leak, start float64
	}{
		{"2/s from 1000/s", 2, 1000},
		{"100/s from 300/s", 100, 300},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			served, refused, hi, lo := bucketRun(40, tc.leak, tc.leak, tc.start, 60, 30, 20_000, 0)
			require.Zero(t, refused, "after 30 s")
			require.Less(t, hi, 38.0)
			require.Greater(t, lo, 0.0)
			require.InDelta(t, 30*tc.leak, float64(served), 0.05*30*tc.leak+3)
		})
	}
}

// A stop holds a call that the bucket would have no room for: the latest
// level, less the leak since, plus the calls in flight and the margin.
func TestLeakyBucketStopsBeforeFull(t *testing.T) {
	t.Parallel()
	b := leakyBucket{size: 40, leak: 10, rate: 10, level: 36, at: 1e6}
	// 36 + 10/s x 0.1 s in flight + a margin of 2 + the call = 40:
	// room for it.
	r, stop := b.pace(1e6, 100_000)
	require.Equal(t, 10.0, r)
	require.Zero(t, stop)
	b.level = 38 // 2 over: 0.2 s of leak
	_, stop = b.pace(1e6, 100_000)
	require.Equal(t, int64(1.2e6), stop)
	_, stop = b.pace(1.2e6, 100_000)
	require.Zero(t, stop, "the leak since made room")
	// Nothing known: no stop.
	var z leakyBucket
	_, stop = z.pace(1e6, 0)
	require.Zero(t, stop)
}

// A key with fewer calls than its pace finds the bucket empty: that must
// not wind the leak's estimate up (it would burst at it when calls come).
func TestLeakyBucketIdleKeepsTheLeak(t *testing.T) {
	t.Parallel()
	// 10 calls a second for 20 s against a leak of 100/s, then as many as
	// the pace lets through: never refused, served at the leak.
	served, refused, hi, _ := bucketRun(40, 100, 100, 2, 40, 20, 20_000, 20e6)
	require.Zero(t, refused)
	require.Less(t, hi, 38.0)
	require.InDelta(t, 2000.0, float64(served), 100)
	var b leakyBucket
	var rep signal.Report
	rep.NPolicies = 1
	rep.Policies[0] = signal.Policy{Source: signal.SourceShopifyREST, Known: signal.FieldLimit | signal.FieldUsed, Limit: 40, Used: 1}
	for now := int64(0); now < 60e6; now += 100_000 {
		b.observe(&rep, now, 10)
	}
	require.Less(t, b.leak, 200.0, "a minute idle")
}
