package outbound

import (
	"context"
	"time"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/signal"
)

// minRefusalPause (µs) is the shortest pause a refusal with an exact wait
// asks of the fleet (refusalPause). A provider that states the
// milliseconds until its next token (Retry-After: 0.004) asks for a pause
// over before the other processes look at the store: they never hear of
// the refusal and keep their rate, and the fleet's next calls are refused
// too, each a refusal more for a provider that bans after a few of any
// kind (issue 18, virtual: 5 bans, goodput 0.47 of the limit). A refusal
// pauses the fleet this long: every process that sends several calls a
// second checks the store in that time and cuts its rate, and the
// controller reads the refusal as it reads one of whole seconds (the pause
// shed the load, and a refusal soon after it says the limit fell).
//
// At first this held only once the provider had banned the key: held for
// every provider, the halving of one that only refuses re-converged in
// 11-12 s, not 1-2, in a run of three or four, and the fleet was banned
// once, at the slow start's end, by one that bans (goodput 0.57). The
// slow re-convergence was a process that heard of both chained refusals
// reading its own share of the fleet's calls as the provider's rate (aimd's
// agreedRate, which now reads no refusal heard of after so short a pause);
// with that gone, the hold costs a provider that only refuses about 1 % of
// goodput (virtual: 0.983 in a run before, 0.970 the median of 3 after)
// and a second or two of its re-convergence (1 -> 2-3 s), and the one
// that bans sees no ban (0.970).
const minRefusalPause = 150_000

// refusalPause returns the pause (µs) a throttle's report asks of the
// fleet: its Retry-After (0: none), at least minRefusalPause. Not for an
// HTTP-date: what is left of its whole second is no exact wait but the end
// of a longer one; nor for a ban, whose wait is the ban's.
func refusalPause(rep *signal.Report) int64 {
	if !rep.HasRetryAfter {
		return 0
	}
	if rep.Throttled && !rep.Banned && !rep.RetryAfterDate && rep.RetryAfter < minRefusalPause {
		return minRefusalPause
	}
	return rep.RetryAfter
}

// sample maps a report onto the controller's sample (package aimd's doc):
// Throttled when the provider throttled, Success for a success,
// Overloaded for other outcomes that hint at load (a 5xx whose outcome is
// unknown, a timeout), Failed for the rest; a Retry-After with any
// refusal.
func sample(rep *signal.Report, latency time.Duration) aimd.Sample {
	s := aimd.Sample{Latency: latency.Microseconds()}
	switch {
	case rep.Throttled:
		s.Outcome = aimd.Throttled
	case rep.Class == signal.ClassSuccess:
		s.Outcome = aimd.Success
	case rep.Unknown || rep.Timeout:
		s.Outcome = aimd.Overloaded
	default:
		s.Outcome = aimd.Failed
	}
	if rep.HasRetryAfter && (rep.Throttled || rep.Class != signal.ClassSuccess) {
		s.RetryAfter = rep.RetryAfter
	}
	s.Banned = rep.Banned
	return s
}

// observe feeds one attempt's report to the key's controller and tells
// the fleet, through the store, what it learned: a pause, a window budget,
// and with SharedRate the new rate.
func (c *Client) observe(ctx context.Context, ks *keyState, rep *signal.Report, latency time.Duration, now int64) {
	if rep.Class == signal.ClassCanceled {
		return
	}
	s := sample(rep, latency)
	s.NoLatency = c.starved(s.Latency)
	if s.Outcome != aimd.Success {
		s.Bunched = ks.adapt.bunched(c.lag.Load())
	}
	shared := 0.0
	if c.shared {
		// Read the fleet's rate just before adapting it, so that this
		// process's change applies to the latest value.
		shared, _ = c.readShared(ctx, ks)
	}
	o := ks.adapt.observe(s, rep, now, shared)
	ks.lastActive.Store(now)
	switch s.Outcome {
	case aimd.Success:
		ks.counts.successes.Add(1)
	case aimd.Throttled:
		ks.counts.throttles.Add(1)
		c.throttles.Add(1)
	default:
		ks.counts.errors.Add(1)
	}
	if o.pause > 0 {
		if rep.Banned {
			// The mark first: a process that finds the pause finds
			// the ban with it (read between the two writes, the ban
			// was taken for a refusal).
			c.syncBan(ctx, ks, o.pause)
		}
		c.syncPause(ctx, ks, o.pause)
	}
	if c.shared && o.decision.Change != aimd.Unchanged {
		c.writeShared(ctx, ks, o.rate)
	}
	if o.budget > 0 {
		c.writeBudget(ctx, ks, o.budgetWindow, o.budget)
	}
	if o.tell != 0 {
		c.tellShare(ctx, ks, o.tell, o.share)
	}
	if o.ask != 0 {
		c.readFleetCount(ctx, ks, o.ask, now)
	}
	if o.callsTell != 0 {
		c.tellCalls(ctx, ks, o.callsTell, o.callsN)
	}
	if o.callsAsk != 0 {
		c.readFleetCalls(ctx, ks, o.callsAsk, o.callsOwn, now)
	}
	if c.metrics != nil {
		c.metrics.observe(ks.label, s.Outcome, o.rate)
	}
}
