package outbound

import (
	"slices"
	"sync"
	"time"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/signal"
)

// statedMargin is the share of a stated quota per window that a key is
// paced at (see hint).
const statedMargin = 0.98

// The latency target never exceeds targetOverMin times the fastest success
// of the last minLatencyWindow.
const (
	targetOverMin    = 2
	minLatencyWindow = int64(30 * time.Second / time.Microsecond)
)

// adaptive is one key's rate controller and what feeds it: the aimd state,
// the provider's stated costs and window budget, the pauses already synced
// to the store, and the latency figures. Its mutex guards every field; its
// methods are the only way in, and none does I/O.
type adaptive struct {
	ctl *aimd.Controller

	mu          sync.Mutex
	state       aimd.State
	syncedUntil int64   // µs: the store already holds a pause until then
	costPerCall float64 // latest actual cost of a call, for cost-bucket hints
	weight      usedWeight
	// bucket follows a leaky bucket that reports its level but not its
	// leak (X-Shopify-Shop-Api-Call-Limit): once the leak is known, the
	// key is paced by it, not by the aimd rate.
	bucket leakyBucket
	// span is the longest time to a windowless quota's reset seen, in
	// whole seconds (µs): the quota's window, as far as the key can tell.
	span    int64
	latency float64 // EWMA of attempt latency, µs
	// minLatency is the fastest success since minLatencyAt (µs).
	minLatency, minLatencyAt int64
	// stated is the provider's headline quota as last reported, for
	// Snapshot; pauses the Retry-After pauses asked for.
	stated StatedLimit
	pauses retryAfterPauses
	// recent holds the latest latencySamples successes' latencies (µs)
	// for Snapshot's percentiles; nRecent counts them all.
	recent  [latencySamples]int64
	nRecent int
	// told is the clock second (Unix s) whose share of a window's count
	// this process last told the fleet (shareToTell), and ask the one
	// whose count for the whole fleet it has yet to read (0: none), once
	// askAt (Unix µs) passed.
	told, ask, askAt int64
	// calls counts this process's calls answered in clock second
	// callsSec (Unix s), for its share of the fleet's (shareEvery).
	// sharedSec is a second told to the fleet whose count is to be read
	// once sharedAt (Unix µs) has passed (0: none), and sharedN this
	// process's calls in it.
	callsSec, sharedSec, sharedAt int64
	calls, sharedN                int
	// spacedAt is when (Unix µs) the key was found paused again just
	// after a pause (0: never): the provider's bucket holds fewer calls
	// than the fleet sends at once, and the fleet spaces its calls
	// (turn.space) for spacedFor after it.
	spacedAt int64
	// pauseFrom and pauseUntil (Unix µs) are when this process first
	// found the key paused, and until when, in the latest pause it
	// found: its own refusal's, or another process's.
	pauseFrom, pauseUntil int64
	// startedAt (Unix µs) is the key's first turn in this process.
	startedAt int64
}

// A process measures its share of the fleet's calls (aimd.Controller.
// FleetShare) in every clock second divisible by shareEvery: after it, each
// process adds its calls answered in it to a count in the store, and reads
// the fleet's sum shareReadAfter seconds into the second (when every
// process sending has answered a call since and told its own). That is
// two store calls per process and key every shareEvery seconds (an add
// and a read); a share not renewed for aimd.ShareTTL (six of them missed)
// lapses.
const (
	shareEvery     = 5
	shareReadAfter = 2
	// minShareCalls is the fewest calls of its own in a second that a
	// process tells and reads its share from: a share of 1 or 2 calls is
	// noise, and a key that slow would pay two store calls every
	// shareEvery seconds for a queue it hardly adds to (the fleet's count
	// then leaves its calls out, and the others' shares read a little
	// high: their queue is counted a little short, as before any share).
	minShareCalls = 4
)

// latencySamples is how many of a key's latest successes Snapshot's
// latency percentiles are taken over.
const latencySamples = 64

// percentile returns the p-th percentile (nearest rank) of the latest
// successes' latencies, 0 before any. a.mu is held.
func (a *adaptive) percentile(p int) time.Duration {
	n := min(a.nRecent, latencySamples)
	if n == 0 {
		return 0
	}
	v := make([]int64, n)
	copy(v, a.recent[:n])
	slices.Sort(v)
	rank := max((p*n+99)/100, 1)
	return time.Duration(v[rank-1]) * time.Microsecond
}

// retryAfterPauses counts a key's pauses asked for by Retry-After.
type retryAfterPauses struct {
	n        int64
	last, at int64 // µs: the latest one's length and when it came
}

func newAdaptive(ctl *aimd.Controller) *adaptive {
	return &adaptive{ctl: ctl, state: ctl.Init()}
}

// rate returns the adapted rate, under the provider's hint; for a learned
// weight budget, the window's ordinary pace (a window is paced faster only
// to catch up after a pause, or to probe).
func (a *adaptive) rate() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rateLocked()
}

func (a *adaptive) rateLocked() float64 {
	if a.bucket.active() {
		return a.ctl.Clamp(a.bucket.rate)
	}
	r := a.ctl.Rate(&a.state)
	if b := a.weight.base(); b > 0 {
		r = min(r, b)
	}
	return r
}

// adopt takes up the fleet's shared rate (Config.SharedRate).
func (a *adaptive) adopt(r float64) {
	a.mu.Lock()
	a.ctl.SetRate(&a.state, r)
	a.mu.Unlock()
}

// turn is what the rate limiter needs to know of the key at now.
type turn struct {
	rate   float64
	until  int64 // µs: the pause's end
	paused bool
	stated bool // the provider stated its rate: it is the fleet's
	// space is the fleet's spacing rate (0: none): every call of the
	// fleet also takes a turn of one GCRA shared by the fleet, at the
	// fleet's rate (this process's over its share) times spaceMargin.
	space float64
}

// Each process paces its own share of a key's rate on a GCRA of its own,
// so two processes' calls fall at any distance from each other, and after a
// pause every process resumes at the same instant. A provider whose bucket
// holds a token or two refuses the second of two calls that close: issue
// 18's limit of 50/s with a burst of 20 ms (one token) held the fleet at 1
// call a second for the 30 s after the halving, every pause's end costing
// the next pause. So every call of a spaced key also takes a turn of a GCRA
// shared by the fleet, at spaceMargin times the fleet's rate: the fleet's
// calls leave at least 1/spaceMargin of its interval apart, the first after
// a pause included. Each process takes turns at its own estimate of the
// fleet's rate (its rate over its share), so the turns it books add up to
// its share over spaceMargin of every second whatever its rate: the shared
// GCRA is busy 1/spaceMargin of the time, and paces nothing the processes'
// own pacing would not. With no share known (a key's first seconds), or a
// share of all of it (maxSpaceShare or more: alone, or the others' calls
// too few to count), the estimate is its own rate; a process alone loses
// nothing by it. The key's start counts as the end of a pause (every
// process of a fleet starts at once), and at a few calls a second
// (lowSpaceRate) a refusal that soon is the fleet's first calls clashing
// (clashLocked), which cuts nothing (aimd.Sample.Clash).
const (
	spaceMargin   = 1.05
	maxSpaceShare = 0.99
	minResumeSpan = 10_000      // µs
	maxResumeSpan = 250_000     // µs
	spacedFor     = 300_000_000 // µs
	minSpacePause = 100_000     // µs
	// lowSpaceRate is the fleet rate (a second) at or under which a
	// refusal spaces the fleet's calls (adaptive.observe).
	lowSpaceRate = 25.0
)

func (a *adaptive) turn(now int64) turn {
	a.mu.Lock()
	defer a.mu.Unlock()
	until, paused := a.state.Paused(now)
	r := a.ctl.Rate(&a.state)
	if a.startedAt == 0 {
		a.startedAt = now
	}
	if paused && until > a.pauseUntil {
		if a.pauseUntil < now {
			// A new pause. One that came as soon as the fleet
			// resumed from a pause long enough to fill the
			// provider's bucket says that the bucket holds fewer
			// calls than the fleet's processes send at once: every
			// pause's end would cost the next (noticed within
			// this process's own interval and a call's latency).
			resumed, long := a.pauseUntil, a.pauseUntil-a.pauseFrom >= minSpacePause
			if a.pauseUntil == 0 {
				// The key's first pause: its start is the end of a
				// pause as long as its life, since every process of
				// a fleet starts at once against a provider's full
				// bucket; at a few calls a second (lowSpaceRate), as
				// for a clash (clashLocked).
				resumed, long = a.startedAt, r <= lowSpaceRate
			}
			if long && now-resumed <= a.resumeSpan(r) {
				a.spacedAt = now
			}
			a.pauseFrom = now
		}
		a.pauseUntil = until
	}
	if p, stop := a.weight.pace(now, int64(a.latency)); p > 0 {
		// A learned window budget: the window's own pace, and a wait
		// for its reset once its calls are spent (usedWeight).
		r = min(r, p)
		if stop > now && stop > until {
			until, paused = stop, true
		}
	}
	stated := a.state.Hint() > 0
	if a.bucket.active() {
		// The bucket's pace, and a stop before a call it would have
		// no room for. The level is the fleet's: so is the pace.
		p, stop := a.bucket.pace(now, int64(a.latency))
		r, stated = a.ctl.Clamp(p), true
		if stop > now && stop > until {
			until, paused = stop, true
		}
	}
	return turn{rate: r, until: until, paused: paused, stated: stated, space: a.spaceLocked(now, r, stated)}
}

// spaceLocked returns the fleet's spacing rate at now for a key paced at r
// (turn.space; 0: none): only for a key found paused again as the fleet
// resumed (spacedAt) within spacedFor, and not at a rate the provider
// states, which the fleet paces on one GCRA already.
func (a *adaptive) spaceLocked(now int64, r float64, stated bool) float64 {
	if stated || a.spacedAt == 0 || now-a.spacedAt >= spacedFor {
		return 0
	}
	sh := a.state.Share()
	if sh <= 0 || sh >= maxSpaceShare {
		// The share is not known yet (a key's first seconds), or
		// reads as the whole fleet's: the fleet's rate is at least
		// this process's, and its calls are spaced at that. A
		// process alone loses nothing (its own pace spaces its calls
		// at its rate already); one of a fleet whose other processes
		// sent too few calls to be counted (minShareCalls) reads a
		// share of 1, and stopped spacing there, its calls left
		// within a token's time of theirs (issue 18, a bucket of one
		// token: refused at every pause's end for 7 s).
		sh = 1
	}
	return spaceMargin * r / sh
}

// booked notes that a turn was booked d µs ahead at now.
func (a *adaptive) booked(now, d int64) {
	a.mu.Lock()
	a.weight.booked(d)
	if d > 0 {
		a.bucket.waited = now
	}
	a.mu.Unlock()
}

// heldBack notes that the pace held a turn back at now (beyond the
// longest a turn is booked ahead).
func (a *adaptive) heldBack(now int64) {
	a.mu.Lock()
	a.bucket.waited = now
	a.mu.Unlock()
}

// paused reports whether a Retry-After pauses the key at now.
func (a *adaptive) paused(now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, p := a.state.Paused(now); p {
		return true
	}
	// A turn booked before the window's calls were spent, due now.
	return a.weight.spent(now, int64(a.latency))
}

// refused reports whether the key's controller holds a pause at now (a
// Retry-After, a ban, or one heard of from the store), which the next
// turn waits out (turn.paused).
func (a *adaptive) refused(now int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, p := a.state.Paused(now)
	return p
}

// knows reports whether the key is paused already until a pause of d µs
// heard of at now ends, within a millisecond: one this process was told
// of, or heard of before.
func (a *adaptive) knows(now, d int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	held, _ := a.state.Paused(now)
	return held >= now+d-pauseSlack
}

// pauseSlack (µs): a pause heard of that ends within it of one known is
// the one known.
const pauseSlack = int64(time.Millisecond / time.Microsecond)

// notePause applies a pause of d µs heard of from the store at now, as if
// this process had been told the Retry-After itself: the key pauses and
// its rate decreases once for the episode. It reports whether the pause
// was news, and the weight window the key follows (0: none). lag is the
// process's timer lag (µs, Client.lag): a process whose calls leave in
// bunches is excused a refusal at a rate the key held (aimd.Sample.Bunched).
// banned says the pause is a provider's ban (Client.readBan): the key
// starts over, as the process banned did (aimd.Sample.Banned).
func (a *adaptive) notePause(now, d, lag int64, banned bool) (news bool, window int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	until := now + d
	// Another process was refused: the bucket was full, and the fleet
	// sends nothing until then.
	a.bucket.quiet(until, float64(a.bucket.size))
	held, _ := a.state.Paused(now)
	// Ours already (or one we have heard of): nothing new.
	if held >= until-pauseSlack {
		return false, 0
	}
	if banned {
		a.ctl.Observe(&a.state, now, aimd.Sample{Outcome: aimd.Failed, RetryAfter: d, Banned: true})
		a.syncedUntil = max(a.syncedUntil, until)
		return true, a.weight.window
	}
	if a.syncedUntil >= until-pauseSlack {
		// One this process put in the store itself without pausing
		// its controller: an exhausted quota's wait for its reset
		// (RateLimit r=0), which is no refusal.
		a.ctl.Extend(&a.state, until)
		return false, 0
	}
	if a.state.Hint() > 0 {
		// The key is paced at a rate the provider states, which
		// already bounds it; the pause may be another process's
		// exhausted quota waiting for its reset, not a refusal (issue
		// 18: on a loaded machine, each such wait cut the fleet's IETF
		// pace to 0.91 of the stated rate for the rest of the run). A
		// process refused cuts its own rate when it hears the refusal.
		a.ctl.Extend(&a.state, until)
		a.syncedUntil = max(a.syncedUntil, until)
		return true, a.weight.window
	}
	if held > 0 && until-held <= a.episodeSlack() {
		// It ends just after the last pause we know of, ended or
		// not: the Retry-After of calls that were in flight when that
		// one came, refused in the same episode. Wait for it, but it
		// is no new refusal to cut the rate for again (issue 18: a
		// second, twice as deep cut, and the refusals more that a
		// provider banning after a few counts).
		a.ctl.Extend(&a.state, until)
		a.syncedUntil = max(a.syncedUntil, until)
		return false, 0
	}
	a.ctl.Observe(&a.state, now, aimd.Sample{Outcome: aimd.Failed, RetryAfter: d, Bunched: bunchedAt(lag, a.ctl.Rate(&a.state)),
		Clash: a.clashLocked(now)})
	a.syncedUntil = max(a.syncedUntil, until)
	return true, a.weight.window
}

// resumeSpan returns how soon (µs) after a pause's end a process paced at r
// may find the key paused again for the pause to have met the fleet's
// resumption: twice its interval, within [minResumeSpan, maxResumeSpan],
// and a call's latency.
func (a *adaptive) resumeSpan(r float64) int64 {
	return 2*min(max(int64(1e6/max(r, 1e-3)), minResumeSpan), maxResumeSpan) + int64(a.latency)
}

// clashLocked reports whether a refusal heard at now met the fleet's first
// calls of the key (aimd.Sample.Clash): heard within resumeSpan of this
// process's first turn, at a rate of a few calls a second (lowSpaceRate),
// where a provider's bucket may hold a token or two. a.mu is held.
func (a *adaptive) clashLocked(now int64) bool {
	r := a.ctl.Rate(&a.state)
	return a.startedAt != 0 && r <= lowSpaceRate && now-a.startedAt <= a.resumeSpan(r)
}

// shareToTell returns the clock second (Unix s) of a refusal late in it
// that the key's controller keeps for its window read, and the key's share
// of the calls served in it, if this process has not told the fleet of
// that second yet (0: nothing to tell); the fleet's count is then to be
// read once the key's pause ends (askAt), when every process has heard of
// the refusal and told its share.
func (a *adaptive) shareToTell(now int64) (sec int64, share int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.shareToTellLocked(now)
}

func (a *adaptive) shareToTellLocked(now int64) (sec int64, share int) {
	k, n := a.state.LateSecond()
	if k == 0 || k == a.told || n <= 0 {
		return 0, 0
	}
	held, _ := a.state.Paused(now)
	a.told, a.ask, a.askAt = k, k, max(held, now+minAskAfter)
	return k, n
}

// minAskAfter (µs) is the least time after a process tells its share of a
// second that it reads the fleet's count of it: the other processes hear
// of the refusal when they next try to send.
const minAskAfter = int64(200 * time.Millisecond / time.Microsecond)

// countCalls counts a call answered at now (Unix µs) towards this
// process's share of the fleet's calls (see shareEvery). It returns a
// clock second divisible by shareEvery that ended, with the calls answered
// in it, for the fleet's count (0: none), and a second told before whose
// fleet count is due to be read, with this process's calls in it (0:
// none). a.mu is held.
func (a *adaptive) countCalls(now int64) (tell int64, n int, ask int64, own int) {
	k := now / 1_000_000
	if k != a.callsSec {
		if a.callsSec > 0 && a.callsSec%shareEvery == 0 && a.calls >= minShareCalls && k > a.callsSec {
			tell, n = a.callsSec, a.calls
			a.sharedSec, a.sharedN = a.callsSec, a.calls
			a.sharedAt = max((a.callsSec+shareReadAfter)*1_000_000, now+minAskAfter)
		}
		a.callsSec, a.calls = k, 0
	}
	a.calls++
	if a.sharedSec != 0 && tell == 0 && now >= a.sharedAt {
		ask, own = a.sharedSec, a.sharedN
		a.sharedSec = 0
	}
	return tell, n, ask, own
}

// fleetCalls gives the key's controller the fleet's count of calls
// answered in clock second sec, own of them this process's: its share of
// them, and a test of a window read (aimd.Controller.FleetCalls). A count
// under minShareCalls of its own is no measure, and a fleet count under
// its own means the store lost a share.
func (a *adaptive) fleetCalls(now, sec int64, own, fleet int) {
	if own < minShareCalls || fleet < own {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctl.FleetCalls(&a.state, now, sec, own, fleet)
}

// fleetCount gives the key's controller the fleet's count of calls served
// in clock second sec (aimd.Controller.FleetCount).
func (a *adaptive) fleetCount(now, sec int64, count int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ctl.FleetCount(&a.state, now, sec, count)
}

// episodeSlack is how long (µs) after a pause's end another pause heard
// from the store may end and still be the same episode's: twice the
// average attempt latency (the calls in flight when the first refusal came
// are answered within about one), at least minEpisodeSlack. a.mu is held.
func (a *adaptive) episodeSlack() int64 {
	return max(int64(2*a.latency), minEpisodeSlack)
}

// minEpisodeSlack is the least episodeSlack, in µs.
const minEpisodeSlack = int64(100 * time.Millisecond / time.Microsecond)

// takeBudget takes up a window budget the fleet learned, if the key still
// follows that window.
func (a *adaptive) takeBudget(window, budget int64) {
	a.mu.Lock()
	if a.weight.window == window {
		a.weight.budget, a.weight.assumed = budget, false
	}
	a.mu.Unlock()
}

// outcome is what one observation leaves for the layers above to do.
type outcome struct {
	decision aimd.Decision
	rate     float64 // the adapted rate after it
	// pause is how long (µs) the store must pause the key for the fleet,
	// 0 when it already knows.
	pause int64
	// budget is a window budget learned here to tell the fleet (0: none),
	// for the window of budgetWindow µs.
	budget, budgetWindow int64
	// tell is a clock second whose share (calls served) the process is to
	// tell the fleet (adaptive.shareToTell; 0: none); ask one whose
	// count for the fleet it is to read now (0: none).
	tell, ask int64
	share     int
	// callsTell is a clock second whose calls answered (callsN) the
	// process is to add to the fleet's count (countCalls; 0: none);
	// callsAsk one whose fleet count it is to read now, with its own
	// calls in it (callsOwn).
	callsTell, callsAsk int64
	callsN, callsOwn    int
}

// observe feeds one attempt's sample and report to the controller at now,
// after taking up the fleet's shared rate when shared > 0, so that this
// process's change applies to the latest value.
func (a *adaptive) observe(s aimd.Sample, rep *signal.Report, now int64, shared float64) outcome {
	a.mu.Lock()
	defer a.mu.Unlock()
	if shared > 0 {
		a.ctl.SetRate(&a.state, shared)
	}
	budget, assumed := a.weight.budget, a.weight.assumed
	s.Hint = a.hint(rep, now-s.Latency)
	a.noteStated(rep, now)
	a.bucket.observe(rep, now-s.Latency, a.ctl.Rate(&a.state))
	var o outcome
	if !a.weight.assumed && (a.weight.budget != budget || assumed) && a.weight.budget > 0 {
		// Learned here, or an assumed budget a refusal confirmed:
		// tell the fleet (an assumption alone is no news).
		o.budget, o.budgetWindow = a.weight.budget, a.weight.window
	}
	if (s.Outcome == aimd.Throttled || s.Outcome == aimd.Overloaded || s.RetryAfter > 0) && a.clashLocked(now) {
		// The fleet's first calls clashed: space them from now on,
		// with or without a pause to find (a bare 429 asks for none).
		s.Clash, a.spacedAt = true, now
	}
	lat := float64(s.Latency)
	if a.latency == 0 {
		a.latency = lat
	} else {
		a.latency += 0.2 * (lat - a.latency)
	}
	if s.Outcome == aimd.Success {
		a.recent[a.nRecent%latencySamples] = s.Latency
		a.nRecent++
		// Anchor the latency target to the fastest recent success (the
		// provider's base latency, as TCP Vegas and BBR do) so that a
		// latency growing slowly with load cannot drag the target along.
		if a.minLatency == 0 || s.Latency < a.minLatency || now-a.minLatencyAt > minLatencyWindow {
			a.minLatency, a.minLatencyAt = max(s.Latency, 1), now
		}
		a.state.CapTarget(a.minLatency * targetOverMin)
	}
	if (s.Outcome == aimd.Throttled || s.Outcome == aimd.Overloaded) && !a.state.Probing() {
		if sh := a.state.Share(); sh > 0 && sh < maxSpaceShare && a.ctl.Rate(&a.state)/sh <= lowSpaceRate {
			// Refused at a fleet rate so low that a provider's
			// bucket holds only a call or two: two processes' calls
			// leaving within a token's time of each other are
			// refused far under the limit, and every such refusal
			// cuts again (issue 18, limits of 30/s halving to 15/s:
			// bare-429 and 503 fell to 5-7 calls a second under a
			// limit of 15, still refused). Space the fleet's calls,
			// as after a pause at the fleet's resumption.
			a.spacedAt = now
		}
	}
	if s.Outcome == aimd.Throttled {
		s.RetryAfter = refusalPause(rep)
	}
	o.decision = a.ctl.Observe(&a.state, now, s)
	o.callsTell, o.callsN, o.callsAsk, o.callsOwn = a.countCalls(now)
	if s.Outcome == aimd.Success && a.ask != 0 && now >= a.askAt {
		o.ask, a.ask = a.ask, 0
	} else if s.Outcome != aimd.Success {
		o.tell, o.share = a.shareToTellLocked(now)
	}
	if a.weight.shown && s.Hint > 0 {
		// A refusal that showed the learned window budget is
		// explained by it: the key waits out the Retry-After and then
		// paces by the window (usedWeight.pace), with no cut to
		// recover from (issue 18: each one cost seconds of slow
		// recovery, and a probe for a raised limit is one).
		a.ctl.SetRate(&a.state, s.Hint)
		o.decision.Change = aimd.Unchanged
	}
	o.rate = a.ctl.Rate(&a.state)
	if a.bucket.active() {
		o.rate = a.ctl.Clamp(a.bucket.rate)
		if o.decision.PausedUntil > now && rep.Throttled {
			a.bucket.quiet(o.decision.PausedUntil, float64(a.bucket.size))
		}
	}
	// A pause (Retry-After, a ban, an exhausted quota) goes to the store
	// once per episode, so every process sharing the key waits too.
	d := o.decision
	if d.PausedUntil > now && d.PausedUntil > a.syncedUntil {
		o.pause = d.PausedUntil - now
		a.syncedUntil = d.PausedUntil
	} else if rep.Known&signal.FieldRemaining != 0 && rep.Remaining == 0 && rep.Known&signal.FieldResetAfter != 0 {
		if p := spentFor(rep.ResetAfter, now, s.Latency); p > 0 && now+p > a.syncedUntil {
			o.pause = p
			a.syncedUntil = now + p
		}
	}
	return o
}

// spentFor returns how long (µs) a key stops at now for a window spent:
// until its reset, reset µs after the provider answered a call of latency
// µs. A reset in whole seconds (IETF RateLimit's t, a delta in seconds) is
// rounded up, so the window may reset up to a second sooner; windows of
// whole seconds are aligned to the clock, so the stop lasts until the
// first whole second after the earliest the reset can be (the provider
// answered after the call was sent). Issue 18, on a loaded machine: a
// window of a second spent by the call sent last in it, answered 13 ms
// into the next with t=1, stopped the fleet for the whole next window,
// and each such stop cost a second's calls (0.84-0.90 of an IETF quota
// where a fixed client had 0.93).
func spentFor(reset, now, latency int64) int64 {
	const second = int64(time.Second / time.Microsecond)
	if reset <= 0 || reset%second != 0 {
		return max(reset, 0)
	}
	earliest := now - max(latency, 0) + reset - second
	return max((earliest/second+1)*second-now, 0)
}

// hint returns the sustainable rate the provider reported, in calls per
// second, or 0: a quota over a window, or a cost bucket's restore rate
// over the cost of a call, or a learned weight budget's fastest pace;
// sent is when rep's request left. a.mu is held.
func (a *adaptive) hint(rep *signal.Report, sent int64) float64 {
	if rep.HasCost && rep.CostActual > 0 {
		a.costPerCall = rep.CostActual
	}
	if rep.RestoreRate > 0 && a.costPerCall > 0 {
		return rep.RestoreRate / a.costPerCall
	}
	if h := a.weight.observe(rep, sent); h > 0 {
		return h
	}
	// Every policy the provider states bounds the rate: the tightest
	// wins. A quota over a known window is a rate; a policy without a
	// window (X-RateLimit-Limit/-Remaining/-Reset) is paced so that what
	// remains lasts until the reset.
	best := 0.0
	const both = signal.FieldLimit | signal.FieldWindow
	const left = signal.FieldRemaining | signal.FieldResetAfter
	for i := range rep.Policies[:min(rep.NPolicies, len(rep.Policies))] {
		p := &rep.Policies[i]
		r := 0.0
		switch {
		case p.Known&both == both && p.Window > 0 && p.Limit > 0:
			// A quota per window, paced a little under it: at exactly
			// the quota, a window whose edges the client cannot see
			// now and then gets one call too many, or runs out and
			// stops the key until its reset.
			r = statedMargin * float64(p.Limit) / (float64(p.Window) / 1e6)
		case p.Known&signal.FieldWindow == 0 && p.Known&left == left && p.ResetAfter > 0 && p.Remaining > 0:
			if p.Known&signal.FieldLimit != 0 && p.Limit > 0 {
				// The window is at least the longest time to a reset
				// seen, in whole seconds (a reset given in Unix
				// seconds, X-RateLimit-Reset's usual form, is
				// whole): pace the limit over it, and what remains
				// over the time to the reset only when that is
				// less (the window was spent ahead of that pace).
				// What remains alone swings with every answer near
				// the reset (2 left 20 ms before it reads as 100/s)
				// and a burst at a window's edge meets a refusal,
				// whose Retry-After pauses the fleet.
				a.span = max(a.span, (p.ResetAfter+999_999)/1_000_000*1_000_000)
				r = statedMargin * float64(p.Limit) / (float64(a.span) / 1e6)
			}
			// A reset in whole seconds from now (X-RateLimit-Reset: 1,
			// not a Unix time) is rounded: the reset may come up to a
			// second sooner. What remains is paced over the least the
			// time may be, and not at all when that is none (a window
			// of a second always says 1: 50 left half way through it
			// read as 50/s, and a provider of 1 s windows not written
			// here got 0.65 of its limit).
			until := p.ResetAfter
			if until%1_000_000 == 0 {
				until -= 1_000_000
			}
			if until > 0 {
				if rest := float64(p.Remaining) / (float64(until) / 1e6); r == 0 || rest < r {
					r = rest
				}
			}
		}
		if r > 0 && (best == 0 || r < best) {
			best = r
		}
	}
	return best
}

// noteStated keeps what rep said for Snapshot: the headline quota when it
// states one, and a Retry-After pause. a.mu is held.
func (a *adaptive) noteStated(rep *signal.Report, now int64) {
	if rep.Known&(signal.FieldLimit|signal.FieldRemaining) != 0 {
		st := StatedLimit{SeenAt: time.UnixMicro(now).UTC()}
		if rep.Known&signal.FieldLimit != 0 {
			st.Limit = rep.Limit
		}
		if rep.Known&signal.FieldRemaining != 0 {
			st.Remaining = rep.Remaining
		}
		if rep.Known&signal.FieldWindow != 0 {
			st.Window = time.Duration(rep.Window) * time.Microsecond
		}
		if rep.Known&signal.FieldResetAfter != 0 {
			st.ResetAt = time.UnixMicro(now + rep.ResetAfter).UTC()
		}
		st.Known = true
		a.stated = st
	}
	if rep.HasRetryAfter && rep.RetryAfter > 0 && (rep.Throttled || rep.Banned) {
		a.pauses.n++
		a.pauses.last, a.pauses.at = rep.RetryAfter, now
	}
}

// view is the controller's part of a KeySnapshot.
type view struct {
	rate, hint float64
	probing    bool
	pausedFor  time.Duration
	avgLatency time.Duration
	p50Latency time.Duration
	p95Latency time.Duration
	stated     StatedLimit
	pauses     retryAfterPauses
	spacing    float64
}

func (a *adaptive) view(now int64) view {
	a.mu.Lock()
	defer a.mu.Unlock()
	v := view{rate: a.rateLocked(), hint: a.state.Hint(), probing: a.state.Probing(),
		avgLatency: time.Duration(a.latency) * time.Microsecond,
		p50Latency: a.percentile(50), p95Latency: a.percentile(95),
		stated: a.stated, pauses: a.pauses}
	if b := a.weight.base(); b > 0 {
		v.hint = b
	}
	v.spacing = a.spaceLocked(now, a.ctl.Rate(&a.state), a.state.Hint() > 0 || a.bucket.active())
	if until, ok := a.state.Paused(now); ok {
		v.pausedFor = time.Duration(until-now) * time.Microsecond
	}
	return v
}

// bunched reports whether calls at the key's rate leave in bunches when the
// process's timers fire lag µs late (see bunchedAt).
func (a *adaptive) bunched(lag int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return bunchedAt(lag, a.ctl.Rate(&a.state))
}

// bunchShare: calls paced at a rate leave in bunches once the process's
// timers fire late by 1/bunchShare of the interval between them or more.
const bunchShare = 8

// bunchedAt reports whether calls paced at rate (a second) leave in bunches
// when the process's timers fire lag µs late: a process starved of CPU
// sends the calls a stall held back together, which can empty a provider's
// small burst at a rate under its limit (aimd.Sample.Bunched). On a quiet
// machine the lag is a fraction of a millisecond: an eighth of the
// interval only at 1,000 calls a second or more.
func bunchedAt(lag int64, rate float64) bool {
	if lag <= 0 || rate <= 0 {
		return false
	}
	return float64(bunchShare*lag) >= 1e6/rate
}
