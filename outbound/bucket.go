package outbound

import (
	"github.com/sluicerl/sluice/signal"
)

// leakyBucket follows a leaky bucket whose level the provider reports on
// every answer but whose leak rate it never states (Shopify's REST Admin
// API: X-Shopify-Shop-Api-Call-Limit: 32/40, calls in the bucket of 40,
// leaking at a rate the plan sets and the provider may lower; a call that
// finds it full is refused with a Retry-After of 2 s, which pauses the
// whole fleet). The level is the fleet's: it integrates the fleet's rate
// minus the leak, so it says what no process can see alone, whether the
// fleet sends more than the leak or less. So the key
//
//   - paces by the level, not by the aimd rate: a PI controller whose
//     integral is the leak as far as the level tells (it grows while the
//     level is under bucketTarget of the bucket, falls while over) and
//     whose proportional part brings the level back; every process of
//     the fleet reads the same level and paces at about the same rate;
//   - stops before a call that the bucket, as the latest report showed it
//     less the leak since, would have no room for, the calls in flight
//     and a margin counted, rather than meet the refusal that pauses the
//     fleet 2 s;
//   - measures the leak across a stop or a pause, when the fleet sent
//     nothing: a level that fell less than the leak says is a leak
//     overestimated (cut to what was measured, at most to a quarter), one
//     that emptied says the leak is at least what left it (a key whose
//     adapted rate, where the integral starts, was far above the leak
//     would otherwise be refused again after every pause).
//
// A level between empty and full means the fleet is served at exactly the
// leak, whatever the estimate's error. The zero value knows nothing; the
// key's adaptive mutex guards it.
type leakyBucket struct {
	size int64 // the bucket, in calls; 0 until a report states it
	// level and at are the latest report's level and when its call left
	// (µs).
	level, at int64
	// leak is the controller's integral: the leak as the level tells it
	// (calls/s); rate the pace it sets.
	leak, rate float64
	// A quiet spell, when the fleet sent nothing (a stop or a pause),
	// from quietFrom (µs, the latest report's call before it) with the
	// bucket at quietLevel, until quietTill (0: none).
	quietFrom, quietTill int64
	quietLevel           float64
	// every is the time between reports, an EWMA (µs).
	every float64
	// waited is when a turn last waited for the pace (µs): the key's
	// calls were held back, not too few to fill the bucket.
	waited int64
}

// The controller's gains (per second² on the level's error for the
// integral, per second for the proportional part): critically damped at
// omega radians a second, at most bucketOmega, so that a leak of 100 that
// halves moves the level by about a sixth of the bucket and the pace
// settles within 2 s; a slow leak gets a slower controller, at least
// bucketReports of its reports a radian.
const (
	bucketOmega    = 3.0
	bucketReports  = 8.0
	bucketMinOmega = 0.05
	bucketTarget   = 0.5 // of the bucket
	// bucketStep is the longest time (µs) one report's error is
	// integrated over: the fleet sent nothing in a pause, and a key idle
	// for a while must not wind the integral up.
	bucketStep = int64(100_000)
	// bucketMargin is the room, in calls, kept free in the bucket beyond
	// the calls in flight.
	bucketMargin = 2
	// bucketMinRate is the slowest pace (calls/s) a known bucket is paced
	// at: it still reports the level.
	bucketMinRate = 0.5
	// bucketFloor is the slowest pace, as a share of the leak.
	bucketFloor = 0.25
	// bucketPredict is the longest time (µs) the level is moved on
	// without a report.
	bucketPredict = int64(1e6)
	// bucketIdle is how long (µs) after a turn last waited for the pace
	// an empty bucket no longer raises the leak.
	bucketIdle = int64(1e6)
)

// shopifyBucket returns the bucket's level and size from a report of
// X-Shopify-Shop-Api-Call-Limit, ok false when rep holds none.
func shopifyBucket(rep *signal.Report) (used, size int64, ok bool) {
	const want = signal.FieldLimit | signal.FieldUsed
	for i := range rep.Policies[:min(rep.NPolicies, len(rep.Policies))] {
		p := &rep.Policies[i]
		if p.Source == signal.SourceShopifyREST && p.Known&want == want && p.Limit > 0 {
			return p.Used, p.Limit, true
		}
	}
	return 0, 0, false
}

// active reports whether the key paces by the bucket.
func (b *leakyBucket) active() bool { return b.size > 0 }

// observe takes one report of the bucket's level, of a call that left at
// sent, and paces the key anew; pace is the key's adapted rate, where the
// integral starts.
func (b *leakyBucket) observe(rep *signal.Report, sent int64, pace float64) {
	used, size, ok := shopifyBucket(rep)
	if !ok {
		return
	}
	if size != b.size {
		*b = leakyBucket{size: size, leak: max(pace, bucketMinRate), at: sent}
	}
	if sent < b.at {
		// An answer to a call that left before the latest report's:
		// an older level, no news.
		return
	}
	if b.quietTill > 0 && sent >= b.quietTill {
		b.measure(used, sent)
	}
	if rep.Throttled {
		// A refusal: the bucket was full.
		used = size
	}
	e := bucketTarget*float64(size) - float64(used)
	if gap := float64(sent - b.at); b.every == 0 {
		b.every = gap
	} else {
		b.every += 0.1 * (gap - b.every)
	}
	dt := float64(min(sent-b.at, bucketStep)) / 1e6
	if used <= 1 && e > 0 && sent-b.waited > bucketIdle {
		// An empty bucket says the leak is more than the fleet sends
		// only when the pace held calls back: a key with fewer calls
		// than its pace would otherwise wind the leak up without
		// bound, and burst at it when calls come.
		dt = 0
	}
	b.leak = max(b.leak+b.ki()*e*dt, bucketMinRate)
	b.level, b.at = used, sent
	b.rate = b.paceAt(float64(used))
}

// measure compares the level of the first call that left after a quiet
// spell with what the leak says: used, of a call that left at sent.
func (b *leakyBucket) measure(used, sent int64) {
	dur := float64(sent-b.quietFrom) / 1e6
	b.quietTill = 0
	if dur <= 0 {
		return
	}
	// What left the bucket, the call itself counted.
	measured := max(b.quietLevel+1-float64(used), 0) / dur
	switch {
	case used <= 1:
		// It may have run empty: the leak is at least that.
		b.leak = max(b.leak, measured)
	case float64(used) > b.quietLevel-b.leak*dur+2:
		// It fell less than the leak says (by more than a call's
		// rounding): the leak is less.
		b.leak = max(measured, b.leak/4, bucketMinRate)
	}
}

// quiet notes that the fleet sends nothing until till (µs) with the bucket
// at level as of the latest report: a stop for room, or the pause of a
// refusal (the level is then the bucket's size).
func (b *leakyBucket) quiet(till int64, level float64) {
	if !b.active() || till <= b.quietTill {
		return
	}
	if b.quietTill == 0 {
		b.quietFrom, b.quietLevel = b.at, level
	}
	b.quietTill = till
}

// paceAt returns the pace for a bucket at level: the leak, plus what
// brings the level back to bucketTarget of the bucket, and never under
// bucketFloor of the leak (a pace far under it books the next turn far
// ahead, past the reports that would have raised it; a full bucket is the
// stop's to guard).
func (b *leakyBucket) paceAt(level float64) float64 {
	e := bucketTarget*float64(b.size) - level
	return max(b.leak+b.kp()*e, b.leak*bucketFloor, bucketMinRate)
}

// omega is the controller's bandwidth (radians a second): bucketOmega, or
// less when the key's reports come too far apart for it (a leak of 2 a
// second reports every half second).
func (b *leakyBucket) omega() float64 {
	if b.every <= 0 {
		return bucketOmega
	}
	return min(bucketOmega, max(1e6/b.every/bucketReports, bucketMinOmega))
}

func (b *leakyBucket) kp() float64 { return 2 * b.omega() }
func (b *leakyBucket) ki() float64 { w := b.omega(); return w * w }

// pace returns the key's pace and, at now, when it must stop until (0:
// no stop). The pace is for the level the latest report showed, or for
// that level less the leak since when that is faster (no report comes
// while the pace is slow). A stop holds the key while the level the latest report
// showed, less the leak since, plus the calls in flight (a latency's
// worth, lat µs), leaves less than bucketMargin free.
func (b *leakyBucket) pace(now, lat int64) (rate float64, stop int64) {
	rate = b.rate
	if dt := min(now-b.at, bucketPredict); dt > 0 {
		// Only ever faster: the calls sent since are few when the
		// pace is slow, and a report on them lowers it again.
		rate = max(rate, b.paceAt(max(0, float64(b.level)-b.leak*float64(dt)/1e6)))
	}
	over := float64(b.level) + b.rate*float64(lat)/1e6 + bucketMargin + 1 - float64(b.size)
	if over <= 0 {
		return rate, 0
	}
	till := b.at + int64(over/b.leak*1e6)
	if till <= now {
		return rate, 0
	}
	b.quiet(till, float64(b.level)+b.rate*float64(lat)/1e6)
	return rate, till
}
