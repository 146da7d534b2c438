package aimd

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// ErrInvalidConfig is wrapped by New for a Config it cannot use.
var ErrInvalidConfig = errors.New("aimd: invalid config")

// RingSize is how many recent success latencies the p95 is taken over.
const RingSize = 32

// chainWindow is how close (µs) a decrease must follow the previous one to
// belong to the same run of decreases, which keeps its Peak.
const chainWindow = 2_000_000

// statedSpan (µs) is how long after a refusal at or under the rate the
// provider states, taken as no news of the limit (recovery to the stated
// rate), another such refusal is news: a limit under the stated one.
const statedSpan = 60_000_000

// A probe above a proven plateau (State.good) that fails doubles the hold
// before the next one, up to 1<<maxHoldShift times Config.Hold.
const maxHoldShift = 3

// A probe that fails below probeSpan x the proven plateau returns to it; trouble
// found further above it means the limit had moved up, and the decrease
// is an ordinary one. One that fails before it is probeEarly x Good above
// it suggests Good itself was marginal: it returns to probeLower x Good.
const (
	probeSpan  = 1.1
	probeEarly = 1.01
	probeLower = 0.98
)

// A probe above a proven plateau (State.good) grows by probeGrowth times
// itself a second (x1.1 a second), not additively: what tells a limit that
// rose from one that did not is a rate past probeSpan x the plateau served
// for a whole second, and at the additive 2 % of the peak a second the
// probe took 5 s to get there, which was most of the 15-26 s an up
// re-convergence took against a provider that states no limit (issue 18
// item 4). Where the limit did not move, the probe is refused sooner after
// it passes the limit (it spends a provider's burst of 0.1 s about 1.4 s
// after, where the additive increase took about 3 s), and a failed probe
// costs the same one refusal and pause.
const probeGrowth = 0.1

// A probe above a proven plateau (State.good) that gets past probeSpan x
// it and x the rate where the last decrease found trouble (State.over),
// served that fast for a whole second with no throttle signal, has found a
// limit that rose: the rate then
// grows by rampGrowth times itself per second (x1.65 a second), as in a
// slow start but gentler, until the first refusal, which ends it as it
// ends a slow start (issue 18 item 4: at the additive 2 % a second, a
// doubled limit took 45 s to find after the probe began).
const rampGrowth = 0.5

// A probe above the limit of a provider that answers with a Retry-After
// costs the whole key that pause. So that probing costs at most about
// 1/probeCost of the time, the hold before a probe (Config.Hold) is at
// least probeCost times the last pause that cut the rate: 30 s after a
// pause of 1 s, the usual whole second a provider rounds a few
// milliseconds up to (issue 18: at a 10 s hold, every probe cost a tenth
// of the time). Pauses count up to maxPauseCost (a ban of minutes does
// not stop probing for hours).
const (
	probeCost    = 30
	maxPauseCost = 10_000_000 // µs
)

// A refusal with a Retry-After at or under the sustained rate (State.sus:
// the highest rate held for a whole sustainSpan with successes and no
// throttle since the last refusal that cut), excuseSpan or more after the
// last throttle signal, is a held refusal. It says either that the limit
// fell under a rate the key kept up for seconds, or nothing much: a level
// held at 0.93 of a provider's limit is refused now and then when calls
// leave a little unevenly, and on a machine starved of CPU often (issue
// 18: the calls of a starved process leave in bunches that empty a small
// burst). The two look alike until the pause ends, so a held refusal is
// answered as noise: a process whose calls leave in bunches
// (Sample.Bunched) keeps its rate, any other resumes at the plateau under
// the rate refused. A limit that did fall refuses the key again soon after
// the pause (a chained refusal), which halves the rate refused
// (confirmedCut): two episodes at a halving, each of about 1 + rate x
// latency refusals. (Session 15 halved at once instead, for one episode;
// on a saturated machine every refusal of a level near the limit then
// halved it, for 30 s or more, and the fleet ran at 0.47 of its limit:
// 0.67-0.82 of it over a run against a fixed client's 0.93.) Refusals that
// keep coming within excuseSpan at a sustained rate are the limit:
// ordinary decreases.
const (
	sustainSpan = 2_000_000  // µs
	excuseSpan  = 10_000_000 // µs
)

// A refusal soon after the pause of a held refusal says that the limit
// fell under a rate the key held for seconds: a step (a plan or a share
// changed), not drift, and its size is unknown. The rate halves from the
// rate the key held (TCP Reno's answer to a loss; State.excused: not the
// rate the held refusal came at when latency had taken the key under the
// rate it held, since halving what was left held a fleet at 0.83 of the
// new limit for the last 30 s of a run, issue 18) and holds
// there before probing above it, as any level holds (Config.Hold, and
// probeCost times the pause), since a provider that bans after a few
// refusals in a window (10 s is usual) has seen two episodes already, and
// a recovery towards the old level would earn another within the window
// (issue 18: at a halving, cuts to 0.64 of the rate recovering towards
// 0.91 of it took three episodes, five refusals and a ban). The price: a
// limit that fell by less than half is served at half the old rate until
// the probe after the hold finds it.
const confirmedCut = 0.5

// Many providers count calls in windows of a second aligned to the clock
// and refuse the rest of a window once its count is spent: they refuse late
// in a second when the rate is near their limit (at windowLate of a second
// or later for a rate up to twice it, and at the end of a slow start, whose
// rate grew through the second), and every call after the refusal until the
// second ends. A refusal of a call sent that late in a clock second,
// with the calls sent after it while it was in flight refused too (none
// served), reads the calls of that second served before it
// as the window's count, if they are at least confirmedCut of the rate
// refused: the rate is set to windowLevel of that count (so no less than
// 0.48 of the rate refused), and recovers to no more until a probe above
// it (State.winCap). A cut by a share of the rate refused alone
// left 1.06 of such a limit after a slow start (0.64 of a rate 1.66 times
// it), and a recovery to 0.91 of a rate refused soon after a pause 1.03 of
// it: each a second episode of refusals within 10 s, and a ban from a
// provider that bans after five (issue 18, in virtual time and with real
// processes). A token bucket serves some of the calls after a refusal,
// even far over its limit, as a token comes: so the read waits for every
// call in flight with the refusal, until the first answer to a call sent
// after it came (issue 18: a slow start's end at 2.5 times a bucket of
// 300/s with five calls in flight, read from the first of them refused,
// held the fleet at 0.9 of the limit for 8 s, where the fifth was served;
// retry-after-seconds 0.881, and 0.962 with the wait).
const windowLate = 0.5

// A provider answering faster than the key sends has no call of the key in
// flight when it refuses, so no refusal after it shows the window (see
// windowLate). Two refusals late in their seconds, within windowSpan, at
// rates at least windowRates apart, each after the same count of calls
// served in its second (within windowSame of each other), show it
// instead: a window's count does not move with the rate, while what part
// of a second a token bucket serves does. Either refusal may be another
// process's, heard of from the store (usually only one process of a fleet
// is refused in an episode), the key's own calls served that second being
// its share of the count; a key that shares its limit so reads the window
// from the fleet's counts alone (lateRefusal, FleetCount). The level is
// then the window's,
// as for a read from a call in flight (issue 18, real processes against a
// clock window answering in 5 ms: after the slow start's end, three more
// episodes 2-3 s apart before the fleet levelled at 0.95 of the limit;
// converge 19-36 s).
//
// Once a read from two episodes showed the provider's windows, a refusal
// late in a second after at least confirmedCut of the rate was served in it
// is read at once: the window's count was spent, at a limit that changed
// (issue 18, real processes against a clock window answering in 5 ms: the
// halving took two episodes, each of one to three refusals, and a provider
// banning after five in 10 s banned the fleet in 1 of 3 runs).
//
// A refusal after less than confirmedCut of the rate was served in its
// second counts towards the read too, from lateShare of it: a slow start's
// rate grew through the second, and when it ends late in one the key has
// served a third to a half of the rate it was refused at (issue 18, real
// processes: the process refused at 105/s after serving 52 read no
// window, the other did, and the two levels summed to 1.05 times the
// count, a third episode). Such a pair must also come at least
// windowApart apart in their seconds: a token bucket's count served by a
// point of a second is about its limit times that point, the same for two
// refusals at the same point whatever the rates, while a window's count is
// spent sooner the faster the key sends (without this, the default
// table's 0.1 s bucket was read as a window at a slow start's end, and
// its Retry-After rows fell from 0.966 to 0.780). The two points must be
// a fifth of a second apart, not a tenth: a bucket of a tenth of a second
// answering in 5 ms served the fleet 61 calls by 0.641 of one second (the
// slow start's end, its rate still growing through the second) and 61 by
// 0.545 of another (the rate it resumed at), a pair read as a window of
// 61, and one process held 0.56 of the limit for the 4 s until the
// fleet's count refuted it (FleetCalls): in virtual time,
// retry-after-seconds and both ban rows 0.935, converge 15 s, in 5 of 9
// runs, against 0.956 and 10 s in all 9 with the fifth.
const (
	windowSame  = 0.05
	windowRates = 0.1
	windowSpan  = int64(10 * sec)
	windowApart = int64(200_000)
	lateShare   = 0.25
)

// A throttle with no Retry-After (a bare 429, a 503) leaves the key
// sending: the provider serves its limit and refuses the rest, so the
// share of calls sent since the last decrease that were served tells how
// far over the limit the rate is. When at least shareSamples such calls
// were answered and fewer than Decrease of them were served, the next cut
// takes the rate to shareMargin of the served share of it (no lower than
// minShareCut of it at once) rather than by Decrease: a slow start that
// overshot a provider's large burst (a second's worth, 2.5 x its limit
// when the burst ran out) is back under the limit in two cuts, not four
// seconds of refusals (issue 18: 360 refusals at a bare-429 provider).
// A Retry-After of sharePause (µs) or less (a provider stating the few
// milliseconds until its bucket holds a call again) leaves the key sending
// as well: such refusals count in the share. (Issue 18: against one with
// a second of burst, the slow start's end brought 50 refusals in a second,
// each with a pause of a few milliseconds, while the cooldown held the
// rate.)
const (
	shareSamples = 8
	shareMargin  = 0.95
	minShareCut  = 0.25
	sharePause   = 100_000
)

// LatencyFloor bounds a decrease the latency alone asks for (Reason
// Latency or Queue, with no throttle signal): it never takes the rate below
// this fraction of the proven rate, the highest rate calls have succeeded
// at in the last one to two BaseWindows and since the last throttle,
// overload or Retry-After (issue 18: a client starved of CPU, whose own
// delays read as the provider's, must not slow itself down without
// bound). So the latency alone takes at most 60 % off the rate in 10 to
// 20 s (a provider that slows down for good because its limit halved is
// followed at once), and a throttle signal takes the rate lower at once.
const LatencyFloor = 0.4

// BaseWindow is how long the base latency of Config.Queue remembers the
// fastest success: it is the fastest of the last one to two windows, so
// that a provider whose latency rose for good is not judged by a floor it
// left long ago.
const BaseWindow = 10_000_000 // µs

// QueueCalls is how many calls a latency-only decrease (Reason Latency or
// Queue, no throttle signal) needs waiting in the provider's queue, on top
// of the latency ratios (LatencyFactor, Queue): the backlog TCP Vegas
// measures, rate x (latency - base), with the rate in calls per second
// (the key's, or the fleet's once Controller.FleetShare told the key's
// share of it) and the latencies in seconds (the p95 for Reason Latency,
// the recent median for Reason Queue, and a call's own latency for
// whether a success is fast). Ratios against a short base read a single
// wait for a service slot as a slowdown: a provider of 2 ms that serves
// its calls one after another at its limit makes a call that meets
// another wait 10 to 20 ms (5 to 10 x the base) at any load, and the rate
// walked down without end (0.66 of the limit, issue 18's external
// slowdown provider). A call that waits for one slot, at a fleet rate at
// or under the server's, waits behind at most rate/limit calls: under
// one. One call or more is a backlog that does not clear in a slot. Vegas
// keeps 2 to 4 packets per flow queued on purpose (alpha, beta); here the
// queue is what the decrease is to prevent, and 2 of each of two
// processes' calls at 20 ms a call is already past the 80 ms the in-repo
// slowdown figures count as slow (1.5 and 2 lost 1-2 % of the calls to it
// there; 1 lost none). Under it the success counts as fast: it earns the
// increase and its latency is the provider's normal. Counted at the key's
// own rate alone, a fleet of N processes had N calls queued before any of
// them saw one (see FleetShare).
const QueueCalls = 1.0

// minP95Samples is how many latencies since the last decrease the p95 needs
// before it may trigger another one.
const minP95Samples = 8

const sec = float64(time.Second / time.Microsecond)

// Defaults for the zero fields of Config.
const (
	DefaultStart         = 1.0 // requests per second
	DefaultFloor         = 0.1
	DefaultSlowStart     = 1.0 // e-fold per second: x2.7 a second
	DefaultDecrease      = 0.9
	DefaultLatencyFactor = 2.0
	DefaultLatencyWeight = 0.2
	DefaultUsageMultiple = 4.0
	// DefaultHold is Config.Hold when it is zero and Config.Plateau set.
	DefaultHold = 10 * time.Second
	// DefaultIncreaseFraction is Increase when Config.Increase is zero, as
	// a fraction of the Peak (the rate where the last decreases began), per
	// second.
	DefaultIncreaseFraction = 0.02
)

// Config configures a Controller. Every zero field means its documented
// default (so the zero Config is usable); rates are requests (or cost
// units) per second. New copies it.
type Config struct {
	// Start is the conservative rate before any signal. Zero means
	// DefaultStart (1/s), clamped into [Floor, Ceiling].
	Start float64
	// Floor and Ceiling bound the rate. Zero Floor means DefaultFloor
	// (0.1/s); zero Ceiling means no ceiling.
	Floor, Ceiling float64
	// SlowStart is the growth before the first decrease: the rate grows
	// by SlowStart times itself per second of fast successes. Zero means
	// DefaultSlowStart; a negative value disables slow start (additive
	// increase from the start).
	SlowStart float64
	// Increase is the additive increase after the first decrease, in
	// requests per second gained per second of fast successes. Zero means
	// DefaultIncreaseFraction of the rate where the last run of decreases
	// began, so that probing is as gentle for a 10/s limit as for a
	// 10,000/s one. Below Decrease x that rate, the rate first recovers
	// quickly towards it (closing the gap by 1-1/e a second).
	Increase float64
	// Decrease is the multiplicative decrease factor, in (0, 1). Zero
	// means DefaultDecrease (0.9): the sawtooth between 0.9 and 1 of the
	// limit averages 0.95 of it.
	Decrease float64
	// Cooldown is the least time between two decreases, on top of the
	// per-episode rule, but for a refusal of a call sent after the pause
	// (longer than a few milliseconds) that came with the last decrease
	// had ended (see newEpisode), or a
	// served share that says the rate is still well over the limit.
	// Zero means none.
	Cooldown time.Duration
	// LatencyTarget anchors the latency target; zero means it is learned:
	// the median latency of the first successes (up to 8, before any
	// decrease), then moved by LatencyWeight.
	LatencyTarget time.Duration
	// LatencyFactor: a p95 above LatencyFactor x target is a slowdown, a
	// success at or below it is fast. Zero means DefaultLatencyFactor
	// (2); it must be > 1.
	LatencyFactor float64
	// LatencyWeight is the EWMA weight (lambda) of new latencies in the
	// target, per second of samples (and at most per sample), so that a
	// busy key's target does not chase a slowdown. Only fast successes
	// move it. Zero means DefaultLatencyWeight (0.2).
	LatencyWeight float64
	// Queue, when set, is the latency gradient (TCP Vegas): when the
	// median latency of the recent successes is above Queue times the
	// base latency (the fastest success of the last BaseWindow or so),
	// the provider is queueing calls, and the rate decreases (once per
	// episode, by Decrease) before the queue grows into a slowdown that
	// LatencyFactor would see. Both rules also need QueueCalls of the
	// key's calls queued (rate x (latency - base)): a wait for one
	// service slot is no queue. Zero means off; it must be > 1.
	Queue float64
	// IgnoreLatency turns the latency signal off: every success is fast.
	IgnoreLatency bool
	// Plateau, when set, is where the rate levels off after a decrease:
	// this fraction of the rate the last run of decreases began at (the
	// last rate known to be too much). Below it the rate recovers
	// quickly; there it holds for Hold before probing above it again,
	// additively. A provider that answers every probe above its limit
	// with a Retry-After pauses the whole key for it, so probing rarely
	// near the last cut, not every few seconds, keeps the key near its
	// limit (the plateau of TCP CUBIC). Zero means no plateau: recovery
	// to Decrease x that rate, then additive increase at once. It must be
	// in [Decrease, 1).
	Plateau float64
	// Hold is how long the rate stays at the plateau before probing above
	// it. Zero means DefaultHold when Plateau is set. A plateau held for a
	// whole Hold is proven (State.Good): a probe that fails within 10 %
	// above it returns to it at once, with no deeper cut (to 98 % of it
	// when the probe failed within 1 %: the plateau was marginal), and the
	// next probe waits twice as long (up to 8 x Hold), so that a key at a
	// limit that does not move pays for a probe ever more rarely. After a
	// Retry-After the hold is at least 30 times the longest pause (a
	// failed probe costs the key that pause). Trouble further above it,
	// or at it, is an ordinary decrease. A probe that gets more than
	// 10 % above the plateau, and was served that fast for a whole second,
	// with no trouble, has found a limit that rose: it ramps up as a
	// gentle slow start (x1.65 a second) until the first refusal, which
	// ends it as it ends a slow start; one refused before it ramped
	// returns to the plateau.
	Hold time.Duration
	// UsageMultiple stops growth while the rate is at or above
	// UsageMultiple times the calls this State has seen complete per
	// second (over the last full second), so that a lightly used key
	// does not bank a rate it never tried, to be spent in one burst
	// later. Zero means DefaultUsageMultiple (4); negative disables it.
	// When N processes share one rate, each sees about 1/N of the calls:
	// use more than 2N.
	UsageMultiple float64
}

// Controller holds a validated Config. It is immutable and safe for
// concurrent use; its zero value is not usable, use New.
type Controller struct {
	start, floor, ceiling float64
	slowStart, increase   float64
	decrease              float64
	cooldown              int64
	target                float64
	factor, weight        float64
	ignoreLatency         bool
	usage                 float64 // 0: no usage cap
	plateau               float64 // 0: none
	queue                 float64 // 0: off
	hold                  int64   // µs
}

func positive(name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s must be a finite number >= 0, got %v", ErrInvalidConfig, name, v)
	}
	return nil
}

// New validates cfg and returns a Controller.
func New(cfg Config) (*Controller, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"Start", cfg.Start}, {"Floor", cfg.Floor}, {"Ceiling", cfg.Ceiling}, {"Increase", cfg.Increase},
		{"Decrease", cfg.Decrease}, {"Plateau", cfg.Plateau}, {"Queue", cfg.Queue}, {"LatencyFactor", cfg.LatencyFactor}, {"LatencyWeight", cfg.LatencyWeight}} {
		if err := positive(f.name, f.v); err != nil {
			return nil, err
		}
	}
	if math.IsNaN(cfg.SlowStart) || math.IsInf(cfg.SlowStart, 0) {
		return nil, fmt.Errorf("%w: SlowStart must be finite, got %v", ErrInvalidConfig, cfg.SlowStart)
	}
	if cfg.Cooldown < 0 || cfg.LatencyTarget < 0 || cfg.Hold < 0 {
		return nil, fmt.Errorf("%w: Cooldown, LatencyTarget and Hold must be >= 0", ErrInvalidConfig)
	}
	c := &Controller{
		start: cfg.Start, floor: cfg.Floor, ceiling: cfg.Ceiling, slowStart: cfg.SlowStart,
		increase: cfg.Increase, decrease: cfg.Decrease, cooldown: cfg.Cooldown.Microseconds(),
		target: float64(cfg.LatencyTarget.Microseconds()), factor: cfg.LatencyFactor,
		weight: cfg.LatencyWeight, ignoreLatency: cfg.IgnoreLatency, usage: cfg.UsageMultiple,
		plateau: cfg.Plateau, hold: cfg.Hold.Microseconds(), queue: cfg.Queue,
	}
	switch {
	case math.IsNaN(c.usage) || math.IsInf(c.usage, 0):
		return nil, fmt.Errorf("%w: UsageMultiple must be finite, got %v", ErrInvalidConfig, c.usage)
	case c.usage == 0:
		c.usage = DefaultUsageMultiple
	case c.usage < 0:
		c.usage = 0
	}
	if c.floor == 0 {
		c.floor = DefaultFloor
	}
	if c.ceiling == 0 {
		c.ceiling = math.MaxFloat64
	}
	if c.ceiling < c.floor {
		return nil, fmt.Errorf("%w: Ceiling %v is below Floor %v", ErrInvalidConfig, c.ceiling, c.floor)
	}
	if c.start == 0 {
		c.start = DefaultStart
	}
	c.start = min(max(c.start, c.floor), c.ceiling)
	if c.slowStart == 0 {
		c.slowStart = DefaultSlowStart
	}
	if c.decrease == 0 {
		c.decrease = DefaultDecrease
	}
	if c.decrease >= 1 {
		return nil, fmt.Errorf("%w: Decrease must be in (0, 1), got %v", ErrInvalidConfig, c.decrease)
	}
	if c.plateau != 0 && (c.plateau < c.decrease || c.plateau >= 1) {
		return nil, fmt.Errorf("%w: Plateau must be in [Decrease, 1), got %v", ErrInvalidConfig, c.plateau)
	}
	if c.queue != 0 && c.queue <= 1 {
		return nil, fmt.Errorf("%w: Queue must be > 1, got %v", ErrInvalidConfig, c.queue)
	}
	if c.plateau != 0 && c.hold == 0 {
		c.hold = DefaultHold.Microseconds()
	}
	if c.factor == 0 {
		c.factor = DefaultLatencyFactor
	}
	if c.factor <= 1 {
		return nil, fmt.Errorf("%w: LatencyFactor must be > 1, got %v", ErrInvalidConfig, c.factor)
	}
	if c.weight == 0 {
		c.weight = DefaultLatencyWeight
	}
	if c.weight > 1 {
		return nil, fmt.Errorf("%w: LatencyWeight must be in (0, 1], got %v", ErrInvalidConfig, c.weight)
	}
	return c, nil
}

// Outcome is what a call's result means for the rate. The zero value is
// no outcome: a Sample with it only applies its RetryAfter and Hint.
type Outcome uint8

const (
	// Success is a call that worked; when fast, it raises the rate.
	Success Outcome = iota + 1
	// Throttled is a provider's refusal for rate reasons: 429, 503, a 418
	// ban, THROTTLED inside a 200. It decreases the rate once per episode.
	Throttled
	// Overloaded is a sign of a struggling provider that is not an
	// explicit throttle: 500, 502, 504, a timeout. It decreases the rate
	// once per episode.
	Overloaded
	// Failed is any other failure (a 4xx, a network error that says
	// nothing about load). It never changes the rate.
	Failed
)

// Sample is one call's outcome, a plain value.
type Sample struct {
	Outcome Outcome
	// Latency, in microseconds, is how long the call took. The call was
	// sent at now - Latency, which decides its episode.
	Latency int64
	// RetryAfter, in microseconds, pauses the key until now + RetryAfter
	// and counts as a throttle signal (once per episode).
	RetryAfter int64
	// NoLatency says Latency does not measure the provider (the caller
	// was starved of CPU, so it includes its own scheduling delay): a
	// Success then counts as fast and neither moves the latency target
	// nor feeds the p95 or the queue signal; only throttles, overloads
	// and Retry-After decrease the rate.
	NoLatency bool
	// Bunched says the caller's calls leave in bunches rather than at an
	// even pace (its timers fire late by a good part of the interval
	// between its calls: it is starved of CPU), so that a refusal at a
	// rate the key held may be a bunch that emptied a provider's small
	// burst below its limit rather than a lower limit: such a refusal is
	// excused once (see sustainSpan).
	Bunched bool
	// Clash says the refusal met the fleet's first calls: every process
	// of a fleet starts a key at once, and a provider whose bucket holds
	// a token or two refuses the second of two calls that close whatever
	// its limit. Before any decrease, in the slow start and before it
	// grew past Start, such a refusal is waited out with no cut (the
	// caller spaces the fleet's calls from then on); any other is an
	// ordinary one.
	Clash bool
	// Banned says the provider banned the caller (a 418, Binance's "IP
	// banned"): it counted too many refusals. With a RetryAfter, a ban
	// the key did not know of restarts the rate (see Observe).
	Banned bool
	// Hint is a sustainable rate the provider reported (a quota over its
	// window, a bucket's restore rate), 0 when none. It caps the rate. A
	// first hint, or one higher than the last, on a Success also raises
	// the rate to it at once, unless a decrease came within the last 2 s:
	// a stated rate needs no slow start. A throttle that comes with a
	// new, lower Hint (or shortly before one) is explained by it: the
	// first success after it paces at that Hint at once.
	Hint float64
}

// Change says what an observation did to the rate.
type Change uint8

// The changes.
const (
	Unchanged Change = iota
	Increased
	Decreased
)

// Reason says why the rate decreased.
type Reason uint8

// The reasons.
const (
	ReasonNone Reason = iota
	ReasonThrottled
	ReasonOverloaded
	ReasonRetryAfter
	ReasonLatency
	ReasonHint
	// ReasonQueue: the latency gradient (Config.Queue) says the
	// provider is queueing calls.
	ReasonQueue
)

// String returns the reason's name.
func (r Reason) String() string {
	switch r {
	case ReasonNone:
		return "none"
	case ReasonThrottled:
		return "throttled"
	case ReasonOverloaded:
		return "overloaded"
	case ReasonRetryAfter:
		return "retry_after"
	case ReasonLatency:
		return "latency"
	case ReasonHint:
		return "hint"
	case ReasonQueue:
		return "queue"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// State is one key's adaptive state. The zero value is a key that has seen
// nothing: its rate is the Controller's Start. It is a plain value: copy
// it, keep it, and pass it back to the same Controller's methods, which
// are the only way to read or change it (Controller.Rate, State.Paused,
// State.Hint, State.P95, ...). It is not safe for concurrent use; Locked
// wraps one behind a mutex.
type State struct {
	// rate is the current rate (0 until the first observation: Start).
	rate float64
	// probing is true while in slow start (before the first decrease),
	// or in a ramp (rampGrowth) after a probe found a limit that rose;
	// ramp says which. started says probing and rate have been
	// initialized.
	probing, ramp, started bool
	// lastDecrease is when the rate last decreased (Unix µs, 0 never): a
	// signal about a request sent before it belongs to that episode.
	lastDecrease int64
	// peak is the rate at which the last run of decreases began: the
	// highest rate known to have been (nearly) fine. Below Decrease x peak
	// the rate recovers quickly towards it.
	peak float64
	// cutTo is the rate the last decrease left.
	cutTo float64
	// level is when the rate reached the plateau after the last decrease
	// (Unix µs, 0 not yet); it probes above it from level + Hold. held
	// says the last decrease came while holding there or probing above
	// it, not while still recovering.
	level int64
	held  bool
	// good is the plateau's rate once it held for a whole hold without
	// trouble (0 none since the last ordinary decrease); backoff counts
	// the probes above it that a refusal failed since (the hold before
	// the next probe is Hold << backoff, at most 3; a probe a queue
	// failed, drained at a cost of a few slow answers, does not count).
	good    float64
	backoff int
	// drained says the last decrease was a probe above good that a queue
	// failed (ReasonQueue, ReasonLatency): the rate went under good, so
	// that the queue the probe built drains, and recovers to good itself
	// (see drainCut); false again once back at good.
	drained bool
	// over is where the last decrease found trouble: the rate a failed
	// probe was refused at, else the Peak the decrease left (0: none). A
	// probe ramps only once served past probeSpan times it (and the
	// plateau).
	over float64
	// pause is the longest Retry-After (µs) that came with a decrease
	// since the last decrease without one, at most maxPauseCost: the cost
	// of a failed probe, which lengthens the hold (probeCost).
	pause int64
	// exitLevel says the last decrease was the one that ended slow start
	// with a Retry-After, or a chained one after the rate grew well past
	// the one it resumed at (chainGrew), and none came since. The level
	// it leaves says less of the limit than one refused at: the slow
	// start's (0.91 x 0.8 of the rate first refused) overshoots 1.2 to 2
	// times, the more the further a provider's burst lets it run, and the
	// chained one's is under a rate that was served. Over the limit, the
	// level is refused again soon, which clears this; under it, only a
	// probe can tell. So it holds for Hold alone before the probe, not
	// probeCost times the pause (issue 18: first refused at 1.18 x the
	// limit, the fleet held 0.86 of it for 30 s).
	exitLevel bool
	// proven is the highest rate a call succeeded at in this BaseWindow
	// or the last, since the last throttle signal (0: none), the bound of
	// LatencyFloor; provenNext is the highest of this window, which began
	// at provenAt (Unix µs).
	proven, provenNext float64
	provenAt           int64
	// excused is, when the last episode's refusal was a held refusal
	// (its rate kept when the calls were bunched, else cut to the plateau
	// under it), the rate the key held before it: the higher of the rate
	// refused and the one it sustained since the last refusal that cut
	// (sus; a latency cut may have taken it lower since). It is 0
	// otherwise. A refusal soon after its pause confirms that the limit
	// fell, and halves it (confirmedCut). Any other decrease clears it.
	excused float64
	// sus is the highest rate held for a whole sustainSpan with successes
	// and no decrease since the last refusal that cut (0: none); susFrom
	// (Unix µs, 0: not yet) began the current span, susLow is the lowest
	// rate and susN the successes in it. refusedAt is when the last
	// episode of throttle signals began (a refusal, an overload, a
	// Retry-After; excused or not; Unix µs, 0 never).
	sus, susLow float64
	susFrom     int64
	susN        int
	refusedAt   int64
	// cycOK counts the calls sent since refusedAt that were served: over
	// the span from that episode to the next, the provider's rate
	// (cycleRate). cycEst is that rate as the last episode read it, when
	// it was a refusal chained soon after a pause (spanRate; 0: none),
	// and cycFrom the rate it refused: a second such episode, at a rate
	// apart, that reads the same rate has read the provider's
	// (agreedRate). cycHeard says that episode was another process's
	// refusal, heard of from the store, after a short pause (heardRead):
	// the key's calls served over its span are its share of a floor.
	cycOK           int
	cycEst, cycFrom float64
	cycHeard        bool
	// chain counts the refusals chained soon after their pauses in a row
	// since the last decrease that was not one (see chainMargin).
	chain int
	// banUntil is when the last ban the key heard of ends (Unix µs, 0
	// none), and banLen how long it was: a ban answer before then is the
	// same ban's, and so is one after that ends within banLen/2 of it
	// (another process's answer of the same ban, heard of from the store
	// as ours ended: issue 18, two real processes each banned for 2 s,
	// and the one whose ban ended 6 ms earlier started over once more,
	// from a quarter of its restarted rate).
	banUntil, banLen int64
	// banRate is the rate the last ban came at, until a ramp after it
	// reaches Plateau times it or a decrease (0: none). A ramp stops
	// there: the limit was found under that rate, and a ramp's
	// overshoot costs several refusals at once (issue 18: ramping from
	// a quarter of it after the ban's hold, the fleet was refused four
	// times at 1.3 times the limit, and banned again).
	banRate float64
	// clockSec is the clock second (Unix s) of the latest call served,
	// and clockOK how many calls sent in it were served. winCap, when not
	// 0, bounds the recovery after the last decrease: its refusal came
	// late in a clock second (windowLate).
	clockSec int64
	clockOK  int
	winCap   float64
	// prevOK is how many calls sent in the clock second before clockSec
	// were served (0: none, or that second was not the one before).
	prevOK int
	// winRead says a window's count was read in this key's life
	// (capWindow) and no fleet's count refuted it since (FleetCalls): the
	// provider is thought to count in clock windows (windowStep).
	winRead bool
	// winKnown says a read from two episodes (lateRefusal, FleetCount)
	// showed that the provider counts in clock windows: a later refusal
	// late in a second, after at least confirmedCut of the rate was
	// served in it, is read at once (see windowSpan).
	winKnown bool
	// winAt is when the call was sent whose refusal was the key's first
	// of the last episode with a Retry-After late in its clock second
	// (Unix µs, 0: none, or a call sent after it in the second was
	// served), winSeen when that refusal came
	// (the calls sent between were in flight), and winN how many calls
	// sent in that second before it were served. winRef counts the calls
	// in flight refused since; the read waits for them all (see
	// windowLate).
	winAt, winSeen int64
	winN, winRef   int
	// winSec is the clock second (Unix s) the window's count of winCap
	// was read in, and winFleet the fleet's count of calls served in it
	// (FleetCount; 0: not known), which a later second's count of the
	// fleet's calls can refute (FleetCalls).
	winSec   int64
	winFleet int
	// late is the last refusal with a Retry-After (the key's own, or
	// another process's pause heard of) late in a clock second that no
	// other such refusal confirmed as a window's yet, and prevLate the one
	// before it, in an earlier second (lateRec; FleetCount may confirm
	// them).
	late, prevLate lateRec
	// epOK and epRef count the calls sent since the last decrease that
	// were served, and refused with no Retry-After (shareSamples).
	epOK, epRef int
	// stated says a new, lower hint came shortly before the last
	// decrease, with it or after it (the provider told its rate as it
	// refused): recovery goes back to it. hintAt is when the hint last
	// fell (Unix µs, 0 never), and hintLow what it fell to.
	stated  bool
	hintAt  int64
	hintLow float64
	// statedExcused is when a refusal at or under an unchanged stated
	// rate last counted as stated (statedSpan; Unix µs, 0 never).
	statedExcused int64
	// lastIncrease is the instant the increase was last accounted to.
	lastIncrease int64
	// pausedUntil is when the last Retry-After ends (Unix µs).
	pausedUntil int64
	// hint is the last provider-reported rate, 0 when none.
	hint float64
	// target is the latency target in µs (0 until known), last moved at
	// targetAt.
	target   float64
	targetAt int64
	// ring holds the last RingSize success latencies; n is how many were
	// added since the last decrease (capped at RingSize), next the slot
	// for the next one.
	ring    [RingSize]int64
	n, next int
	// queued is the latency (µs) of the call that set off the last
	// latency decrease (ReasonQueue or ReasonLatency; 0: none since
	// another decrease); until the next decrease, falling latencies (a
	// queue draining) are not news, nor, for chainWindow, any call that
	// waited less (tail).
	queued int64
	// queueMed is the median latency (µs), queueFrom the rate, queuePeak
	// the peak (the level recovery aims at) and queueProbing and
	// queueRamp the slow start's state before the last latency decrease:
	// what a queue read that shows the scatter undoes (scatter). spread
	// and spreadTail are the provider's own scatter (µs, 0: none known):
	// how far over its fastest answer its median and its slow answers
	// come (the 90th percentile at rest, the 95th in a queue read), which
	// the latency rules allow for (see idleSpread, scatter and
	// latencyBound). restReads counts idleSpread's reads, up to
	// idleSpreadSamples: a scatter measured at rest is not raised by a
	// queue read.
	queueMed     int64
	queueFrom    float64
	queuePeak    float64
	queueProbing bool
	queueRamp    bool
	spread       int64
	spreadTail   int64
	restReads    int
	// base keeps the fastest success latency (µs) of this BaseWindow and
	// the last.
	base Fastest
	// useCount calls have completed since useStart (Unix µs); useRate is
	// the completions per second over the last full second, valid when
	// useKnown.
	useCount int
	useStart int64
	useRate  float64
	useKnown bool
	// share is this process's share of the calls the fleet sharing the
	// key sends (FleetShare; 0: unknown, counted as 1), told at shareAt
	// (Unix µs).
	share   float64
	shareAt int64
}

// Decision is the result of an observation, a plain value.
type Decision struct {
	Rate        float64
	Change      Change
	Reason      Reason // why it decreased
	PausedUntil int64  // Unix µs; the key sends nothing before it
}

// Init returns the state of a key that has seen nothing: Start rate, slow
// start on.
func (c *Controller) Init() State {
	return State{rate: c.start, probing: c.slowStart > 0, started: true}
}

func (c *Controller) start0(s *State) {
	if !s.started {
		*s = c.Init()
		return
	}
	// A State that comes back from elsewhere (a store, a peer) may be
	// damaged: bring it into range rather than panic or spread a NaN.
	if !(s.rate >= c.floor && s.rate <= c.ceiling) {
		s.rate = c.clampRate(s.rate)
	}
	if uint(s.next) >= RingSize || uint(s.n) > RingSize {
		s.next, s.n = 0, 0
	}
	s.peak, s.cutTo, s.hint, s.hintLow = sane(s.peak), sane(s.cutTo), sane(s.hint), sane(s.hintLow)
	s.target, s.useRate, s.good, s.over = sane(s.target), sane(s.useRate), sane(s.good), sane(s.over)
	s.proven, s.provenNext = sane(s.proven), sane(s.provenNext)
	s.sus, s.susLow = sane(s.sus), sane(s.susLow)
	s.pause = min(max(s.pause, 0), maxPauseCost)
	if !(s.share > 0 && s.share <= 1) {
		s.share, s.shareAt = 0, 0
	}
	if s.spread < 0 || s.spread > maxSpread {
		s.spread = 0
	}
	if s.spreadTail < s.spread || s.spreadTail > maxSpread {
		s.spreadTail = s.spread
	}
	s.restReads = min(max(s.restReads, 0), idleSpreadSamples)
	if s.queueMed < 0 {
		s.queueMed = 0
	}
	s.queueFrom = sane(s.queueFrom)
	s.queuePeak = sane(s.queuePeak)
	if c.plateau == 0 {
		s.good = 0 // a proven plateau means nothing without one
	} else if s.good > 0 {
		s.good = min(max(s.good, c.floor), c.ceiling)
	}
	if s.good == 0 || s.backoff < 0 {
		s.backoff = 0
	} else if s.backoff > maxHoldShift {
		s.backoff = maxHoldShift
	}
}

// sane returns f when it is finite and >= 0, else 0.
func sane(f float64) float64 {
	if f >= 0 && f <= math.MaxFloat64 {
		return f
	}
	return 0
}

// clampRate brings a rate into [Floor, Ceiling]; NaN is Start.
func (c *Controller) clampRate(r float64) float64 {
	if math.IsNaN(r) {
		return c.start
	}
	return min(max(r, c.floor), c.ceiling)
}

// Clamp brings r into [Floor, Ceiling], as every rate the controller sets
// is: for a rate decided elsewhere (a NaN r is Start).
func (c *Controller) Clamp(r float64) float64 { return c.clampRate(r) }

// Rate returns the key's current rate.
func (c *Controller) Rate(s *State) float64 {
	if !s.started {
		return c.start
	}
	return c.clampRate(s.rate)
}

// Paused reports whether the key is paused by a Retry-After at now, and
// until when.
func (s *State) Paused(now int64) (until int64, paused bool) {
	return s.pausedUntil, now < s.pausedUntil
}

// Hint returns the last rate the provider reported (Sample.Hint), in
// requests per second, 0 when none: the rate is capped by it.
func (s *State) Hint() float64 { return s.hint }

// Probing reports whether the key is still in slow start (no decrease
// yet).
func (s *State) Probing() bool { return s.probing }

// Good returns the proven plateau (Config.Plateau): the rate that held for
// a whole Hold without trouble, 0 when none since the last ordinary
// decrease.
func (s *State) Good() float64 { return s.good }

// CapTarget lowers the latency target to at most max µs when it is known
// and above it: a caller that knows a better anchor (the fastest recent
// success, as TCP Vegas and BBR use) keeps a latency that grows slowly
// with load from dragging the target along. A max <= 0 does nothing.
func (s *State) CapTarget(max int64) {
	if max > 0 && s.target > float64(max) {
		s.target = float64(max)
	}
}

// SetRate makes r the key's rate, within [Floor, Ceiling]: a rate decided
// elsewhere, such as the one a fleet shares in a store, that the next
// observation adapts from. A NaN r is ignored.
func (c *Controller) SetRate(s *State, r float64) {
	if math.IsNaN(r) {
		return
	}
	c.start0(s)
	s.rate = c.clampRate(r)
}

func (c *Controller) ceilingFor(s *State) float64 {
	if s.hint > 0 {
		return max(min(c.ceiling, s.hint), c.floor)
	}
	return c.ceiling
}

// Observe applies one sample at now to s and returns the decision.
func (c *Controller) Observe(s *State, now int64, in Sample) Decision {
	c.start0(s)
	if s.shareAt != 0 && (now-s.shareAt > ShareTTL || now < s.shareAt) {
		s.share, s.shareAt = 0, 0
	}
	d := Decision{}
	rate0 := s.rate
	if in.Outcome != 0 {
		s.count(now)
	}
	latency := max(in.Latency, 0)
	sent := now - latency
	prevPause := s.pausedUntil
	if in.Outcome == Success {
		s.served(sent)
	}
	if s.winAt > 0 && s.winCap == 0 {
		switch {
		case sent > s.winAt && sent < s.winSeen && sent/int64(sec) == s.winAt/int64(sec):
			// In flight when the refusal came.
			if in.Outcome == Success {
				// Served after the refusal, in the same second: no
				// window's count was spent.
				s.winAt = 0
			} else if in.Outcome == Throttled && !in.Banned {
				s.winRef++
			}
		case s.winRef > 0 && (in.Outcome == Success || in.Outcome == Throttled || in.Outcome == Overloaded):
			// The first answer to a call sent once the refusal had
			// come (after its pause): every call in flight with it
			// was answered, and none was served. The fleet shares
			// the rate as after any change (outbound's
			// Config.SharedRate).
			if d.Change = c.capWindow(s, s.winAt/int64(sec), 0); d.Change == Decreased {
				d.Reason = ReasonThrottled
			}
		}
	}
	if s.lastDecrease != 0 && sent >= s.lastDecrease {
		switch {
		case in.Outcome == Success:
			s.epOK++
		case (in.Outcome == Throttled || in.Outcome == Overloaded) && in.RetryAfter <= sharePause:
			s.epRef++
		}
	}
	if in.RetryAfter > 0 {
		s.pausedUntil = max(s.pausedUntil, addSat(now, in.RetryAfter))
	}
	if in.Hint > 0 && !math.IsInf(in.Hint, 0) {
		rose := in.Hint > s.hint
		if s.hint == 0 || in.Hint < s.hint {
			// A lower stated rate explains the trouble of the
			// current episode, even when the decrease came before
			// it, and of one that begins soon after.
			s.hintAt, s.hintLow, s.stated = now, in.Hint, true
		}
		s.hint = in.Hint
		if rose && s.rate < in.Hint && in.Outcome == Success && in.RetryAfter == 0 &&
			(s.lastDecrease == 0 || now-s.lastDecrease > chainWindow) {
			// The provider stated its rate, or raised it, and no
			// trouble says otherwise: pace to it at once, with no
			// slow start towards a rate already known (issue 18).
			s.rate = c.ceilingFor(s)
			s.peak = max(s.peak, s.rate)
			s.probing, s.ramp = false, false
			s.lastIncrease = now
			d.Change = Increased
		}
	}
	if ceil := c.ceilingFor(s); s.rate > ceil {
		s.rate = ceil
		s.probing, s.ramp = false, false
		d.Change, d.Reason = Decreased, ReasonHint
	}

	sameBan := false
	if in.Banned && in.RetryAfter > 0 {
		if now >= s.banUntil && addSat(now, in.RetryAfter) > addSat(s.banUntil, s.banLen/2) {
			c.restart(s, now, in.RetryAfter)
			d.Change, d.Reason = Decreased, ReasonThrottled
		} else {
			sameBan = true
		}
	}

	var reason Reason
	switch {
	case sameBan:
		// Another answer of the ban the key started over for: its
		// pause is all it asks.
	case in.Outcome == Throttled:
		reason = ReasonThrottled
	case in.Outcome == Overloaded:
		reason = ReasonOverloaded
	case in.RetryAfter > 0:
		reason = ReasonRetryAfter
	case in.Outcome == Success && !in.NoLatency:
		reason = c.success(s, now, latency)
	}
	if reason != ReasonNone {
		// A served share that says the rate is well over the limit is
		// news as soon as it is known, cooldown or not: it comes from
		// calls sent after the last decrease.
		news := c.newEpisode(s, now, sent, prevPause) || (sent >= s.lastDecrease && c.servedShare(s, reason, in) < c.decrease) ||
			c.refusedAfterLatency(s, reason)
		held := news && c.heldRefusal(s, now, sent, prevPause, reason, in)
		// The fleet's first calls clashed (Sample.Clash) before the
		// slow start grew: nothing is known of the limit (issue 18, a
		// bucket of one token at 100/s: cut to 0.64 of Start and out
		// of slow start, the fleet was refused at each pause's end and
		// sent a call a second for 40 s). The next refusal is an
		// ordinary one.
		clash := news && in.Clash && s.probing && !s.ramp && s.lastDecrease == 0 && s.rate <= c.start &&
			reason != ReasonLatency && reason != ReasonQueue
		if clash || (held && in.Bunched) {
			// A clash, or a refusal at a rate the key sustained
			// by a process whose calls leave in bunches: wait out
			// the pause, keep the rate (and the slow start). The
			// episode begins here, so the refusals of calls in
			// flight with it are not news.
			s.refusedAt, s.lastDecrease, s.cutTo, s.cycOK, s.cycEst, s.cycFrom = now, now, s.rate, 0, 0, 0
			s.susFrom, s.n, s.queued = 0, 0, 0
			if !clash {
				s.excused = max(s.rate, s.sus)
			}
		} else if news {
			f := c.decrease
			queued := int64(0)
			if reason == ReasonQueue || reason == ReasonLatency {
				queued = max(latency, 1)
			}
			peak0, probing0, ramp0 := s.peak, s.probing, s.ramp
			if reason == ReasonQueue {
				// Cut by as much as the queue is deep (down to half
				// at once), so that it drains quickly; a rate the
				// queue kept up with (or grew at) was too much: the
				// run's peak is at most the rate cut from.
				f = min(f, max(0.5, c.queue*float64(s.base.Value())/float64(recentMedian(s))))
				if s.queued > 0 {
					s.peak = min(s.peak, s.rate)
				}
			}
			if reason == ReasonLatency {
				// Far over the target, cut deeper (down to half at
				// once), so that a queue built up drains quickly.
				f = min(f, max(0.5, c.latencyBound(s)/float64(max(s.P95(), 1))))
			}
			shareCut := 1.0
			if ok := c.servedShare(s, reason, in); ok < f {
				// How far over the limit the rate is.
				f = max(ok*shareMargin, minShareCut)
				shareCut = f
			}
			slowExit, chained, confirmed, heldCut, stepped, cycled := false, false, false, false, false, false
			// Another process's refusal after a short pause: no read
			// of the provider's rate (agreedRate).
			heard := heardRead(s, in, prevPause)
			if in.RetryAfter > 0 && c.plateau > 0 && (reason == ReasonThrottled || reason == ReasonRetryAfter) {
				if prevPause > 0 && sent-prevPause <= chainWindow && in.RetryAfter > sharePause {
					// Refused again soon after the last pause ended:
					// the limit fell well below the rate cut to last
					// time. Cut twice as deep, so that a provider
					// that bans after a few refusals sees few; to
					// half the rate refused, and hold there, when
					// the last pause was a held refusal's
					// (confirmedCut). Not for a pause of a few
					// milliseconds (sharePause): it sheds no load,
					// so the refusals after it are the same rate's,
					// and the served share says how far over it is
					// (issue 18: a provider stating the milliseconds
					// until its next token refused call after call
					// when its limit halved; each refusal, counted as
					// chained, cut 0.64 again, to 0.33-0.37 of the old
					// rate, and the fleet held 0.84-0.90 of the new
					// limit until a probe).
					f = c.decrease * c.decrease
					chained = true
					if s.excused > 0 {
						// Half the rate held, however far a
						// latency cut took the key under it,
						// and at least to the plateau under
						// the rate refused.
						f, confirmed = min(confirmedCut*s.excused/s.rate, c.plateau), true
					}
					if est := c.agreedRate(s, sent, heard); est > 0 && est < f*s.rate {
						// Two episodes read the provider's rate
						// alike: resume under it (agreedRate).
						f, cycled = cycleLevel*est/s.rate, true
					}
				} else if s.probing {
					// The end of a slow start, which grows by
					// e^SlowStart a second: by the time the refusal
					// comes back, the rate is well over the limit
					// (issue 18: 133/s at a limit of 100/s), and
					// every refusal more costs a pause. Cut twice as
					// deep, as for a refusal soon after a pause, and
					// recover under the rate one decrease leaves.
					f = c.decrease * c.decrease
					slowExit = true
				} else if n := s.windowStep(sent); held && n > 0 {
					// Refused at a rate the key held, by a clock
					// window whose count ran out well before the
					// second before's had: the limit fell under
					// the rate held, by a step the count only
					// bounds (windowStep). Halve the rate held now,
					// as a refusal after the pause would confirm,
					// or to the count if that is lower.
					to := min(confirmedCut*max(s.rate, s.sus), windowLevel*float64(n))
					f, confirmed, stepped = min(to/s.rate, c.plateau), true, true
				} else if held {
					// Refused at a rate the key held for seconds, by
					// a process whose calls are not bunched
					// (Sample.Bunched): resume at the plateau under
					// it, as after any refusal, but remember the
					// rate, which a refusal soon after the pause
					// halves (confirmedCut).
					f, heldCut = c.plateau, true
				} else {
					// The pause itself shed the load: resume at the
					// plateau under the rate refused, near the last
					// good rate, not from a deep cut (issue 18).
					f = c.plateau
					if est := c.cycleRate(s, sent, prevPause); est > 0 {
						// Refused again a while after the last
						// episode, by a provider whose burst
						// carried the rate for seconds: resume
						// at what it served since (cycleRate).
						f, cycled = cycleLevel*est/s.rate, true
					}
				}
			}
			if chained {
				s.chain++
			} else {
				s.chain = 0
			}
			// A pause of a few milliseconds sheds no load: the share
			// served still says how far over the rate is.
			f = min(f, shareCut)
			from, resumed, levelAt, sus := s.rate, s.cutTo, s.level, s.sus
			if queued > 0 {
				s.queueMed, s.queueFrom, s.queuePeak = recentMedian(s), from, peak0
				s.queueProbing, s.queueRamp = probing0, ramp0
			}
			wait := int64(0)
			if queued > 0 {
				// What the recent calls waited: their median over
				// the fastest, less the provider's own scatter; or,
				// up to a fifth of drainSpan, what this call waited,
				// when more. A queue that grows through a probe is
				// deepest at its last call, and a fleet's calls
				// through one server wait in a sawtooth whose median
				// is half the queue (issue 18, two processes against
				// a slowdown answering in 5 ms: cut at a wait of 30
				// ms from a median of 14 ms, the fleet went to 0.93
				// of the limit, the queue drained at 3.5 calls a
				// second, and each probe left 6-18 answers over the
				// figures' 35 ms: settle never in 4 runs of 10). The
				// bound keeps a single slow answer (a provider's
				// scatter) from cutting the drain deeper than 0.8.
				base := s.queueSpread() + s.base.Value()
				wait = max(recentMedian(s)-base, min(latency-base, drainSpan/5), 0)
			}
			c.cut(s, now, f, wait)
			if heldCut {
				s.excused = max(from, sus)
			}
			if stepped {
				// The count this second's calls in flight show is
				// only a bound: no window read raises the rate.
				s.winCap = s.rate
			}
			if in.RetryAfter > 0 {
				// Every Retry-After costs a pause: recovery does not
				// rush back towards a peak a run of them disproved
				// (after a slow start, the overshoot); the rate cut
				// from is the best known bound.
				s.peak = min(s.peak, from)
				if s.good == 0 && (levelAt == 0 || now-levelAt < chainWindow) {
					// Not half way back (Config.Plateau's held
					// level) unless the level held a while: a
					// provider's bucket lets a rate over its limit
					// pass until its burst is spent, the sooner the
					// further over, so a rate refused soon after it
					// was reached overstates the limit, and every
					// refusal more costs another pause.
					s.held = false
				}
				if slowExit {
					// Recovery aims under the rate cut by one
					// ordinary decrease, not at the overshoot.
					s.peak = min(s.peak, from*c.decrease)
					s.exitLevel = true
				}
				if chained && resumed > 0 {
					// Refused again soon after the last pause,
					// before the rate grew far from the one it
					// resumed at: that one was already over the
					// limit, and recovery stays under it rather than
					// earn one more pause.
					s.peak = min(s.peak, resumed)
					if s.chain > 1 {
						// A second chained refusal in a row:
						// the episodes so far cost a provider
						// that bans after a few refusals in a
						// window most of its count (chainMargin).
						s.peak = min(s.peak, resumed*chainMargin)
					}
					if from > chainGrew*resumed && !confirmed && !cycled {
						// The rate grew well past the one it
						// resumed at before the refusal: that
						// one is a guess under the limit, not a
						// rate refused, and only a probe tells
						// how far under (exitLevel).
						s.exitLevel = true
					}
				}
				if cycled {
					// No recovery above the provider's rate.
					s.peak, s.held = s.rate/c.plateau, false
				}
				if confirmed {
					// The limit fell by a step of unknown size:
					// no recovery above the halved rate, which
					// holds as any level does (Config.Hold, and
					// probeCost x the pause) before a probe looks
					// for more.
					s.peak, s.held = s.rate/c.plateau, false
				}
			}
			if s.good > 0 {
				// A failed probe: it found the limit near the rate
				// it was refused at.
				s.over = from
			} else {
				s.over = s.peak
			}
			switch reason {
			case ReasonLatency, ReasonQueue:
				// The latency alone: within bounds (LatencyFloor).
				if bound := LatencyFloor * s.proven; s.rate < bound {
					s.rate = max(min(from, bound), c.floor)
					s.cutTo = s.rate
				}
			default:
				// A throttle signal: what succeeded before proves
				// nothing now.
				s.proven, s.provenNext, s.provenAt = 0, 0, 0
				s.cycEst, s.cycFrom, s.cycHeard = 0, 0, false
				if chained {
					s.cycEst, s.cycFrom, s.cycHeard = c.spanRate(s, sent), from, heard
				}
				s.sus, s.refusedAt, s.cycOK = 0, now, 0
			}
			s.susFrom = 0
			if in.RetryAfter > 0 {
				// The longest pause so far prices a probe: a
				// provider whose pauses end on whole seconds asks
				// anything from a few milliseconds to a second.
				s.pause = min(max(s.pause, in.RetryAfter), maxPauseCost)
			} else {
				s.pause = 0
			}
			s.stated = s.hintAt != 0 && now-s.hintAt <= chainWindow
			if !s.stated && s.hint > 0 && from <= s.hint && in.RetryAfter > 0 && !in.Banned &&
				reason != ReasonLatency && reason != ReasonQueue &&
				(s.statedExcused == 0 || now-s.statedExcused > statedSpan) {
				// Refused with a Retry-After at or under the rate
				// the provider states, which it has not lowered: its
				// own figure says the rate was not too much (sends
				// bunched by a starved machine, a window's edge), and
				// the pause shed the bunch, so recovery goes back to
				// it after the pause, as for a newly stated rate,
				// not to a plateau under it for 30 pauses' worth
				// (issue 18: on a loaded machine one refusal under an
				// IETF quota held the fleet at 0.77-0.89 of it for
				// the rest of the run's half). Once a statedSpan: a
				// second refusal there is a limit under the stated
				// one, and levels as any; so does one with no pause,
				// which sheds nothing.
				s.stated, s.statedExcused = true, now
			}
			s.queued = queued
			if reason == ReasonQueue {
				// A queue shows soon after the rate passes the
				// provider's: the limit is just under the rate cut
				// from, as after trouble found while holding.
				s.held = true
			}
			if s.rate < from || (reason != ReasonLatency && reason != ReasonQueue) {
				d.Change, d.Reason = Decreased, reason
			}
		}
		if (in.Outcome == Throttled || in.Outcome == Failed) && !in.Banned && c.lateRefusal(s, now, sent, rate0, in) {
			d.Change, d.Reason = Decreased, ReasonThrottled
		}
		// Time spent in trouble does not count towards an increase.
		s.lastIncrease = now
	} else if in.Outcome == Success {
		s.prove(now)
		s.sustain(now)
		if !in.NoLatency && !c.fast(s, latency) {
			s.lastIncrease = now // slow time does not count either
		} else if c.grow(s, now) {
			d.Change = Increased
		}
		if d.Change == Unchanged && s.rate > rate0 {
			d.Change = Increased // a cut taken back (scatter)
		}
	} else if in.Outcome == Failed {
		// Nor does time spent failing: a success after a run of errors
		// earns only the time since the last of them (one-way ratchet).
		s.lastIncrease = now
	}
	d.Rate, d.PausedUntil = s.rate, s.pausedUntil
	return d
}

// restart answers a ban the key did not know of, which lasts d µs from
// now: the provider counted too many refusals, and what it allows when the
// ban ends is unknown (a ban of 30 s outlasts many a limit's change). The
// key starts over as a new key does, from Start, and recovers (as fast as
// slow start, no faster) to a quarter of the rate it was banned at (a
// confirmed step down, twice: the rate banned at was already too much,
// and the limit may have fallen during the ban), where it holds for
// Config.Hold, as after any decrease, before a probe above it, which costs
// a refusal or two, not the ban's length. Issue 18: a fleet banned for 30 s
// came back at the rate it was banned at, over a limit that had halved in
// the meantime, and five refusals in two seconds earned a second ban; at
// half that rate, it came back at 82/s over a limit of 50/s and was banned
// again.
//
// A ban soon after a chained refusal (within excuseSpan of it) is bounded
// by what that refusal read, when that is not a pause-only span's
// (agreeFloor of the rate or more): the calls served since the episode
// before it, over the span (State.cycEst), at most the provider's rate.
// The ramp after the ban levels off under that rather than under the rate
// banned at, which after a slow start's end is its overshoot (issue 18, a
// bucket of a second at 100/s, OS processes answering in 5 ms: banned at
// the chained refusal after a slow start's end at 4 times the limit, the
// fleet ramped to 0.91 of 2.6 times the limit, and the bucket let it run
// there until five refusals in flight brought a second ban).
func (c *Controller) restart(s *State, now, d int64) {
	to := max(c.floor, s.rate*confirmedCut*confirmedCut)
	banAt := s.rate
	if est := s.cycEst; est > 0 && est < banAt && est >= agreeFloor*s.rate && now >= s.refusedAt && now-s.refusedAt <= excuseSpan {
		banAt = est
	}
	s.banUntil, s.banLen, s.banRate = addSat(now, d), d, banAt
	s.rate = min(to, max(c.start, c.floor))
	s.peak = to / c.decrease
	if c.plateau > 0 {
		s.peak = to / c.plateau
	}
	s.cutTo, s.over = s.rate, to
	s.probing, s.ramp, s.held, s.excused, s.exitLevel = false, false, false, 0, false
	s.level, s.good, s.backoff, s.drained = 0, 0, 0, false
	s.proven, s.provenNext, s.provenAt = 0, 0, 0
	s.sus, s.susFrom, s.refusedAt, s.cycOK, s.cycEst, s.cycFrom = 0, 0, now, 0, 0, 0
	s.epOK, s.epRef, s.pause, s.chain = 0, 0, 0, 0
	s.winCap, s.winAt, s.winRef, s.late, s.prevLate = 0, 0, 0, lateRec{}, lateRec{}
	s.winSec, s.winFleet = 0, 0
	s.lastDecrease, s.lastIncrease = now, now
	s.n = 0
}

// servedShare returns the share of the calls sent since the last decrease
// that were served, when a throttle signal with no Retry-After comes and
// shareSamples or more of them were answered; else 1.
func (c *Controller) servedShare(s *State, reason Reason, in Sample) float64 {
	n := s.epOK + s.epRef
	if in.RetryAfter > sharePause || (reason != ReasonThrottled && reason != ReasonOverloaded) || n < shareSamples {
		return 1
	}
	return float64(s.epOK) / float64(n)
}

// A provider whose bucket holds seconds of its limit (issue 18's external
// providers held a second's) lets a rate over its limit pass for seconds
// after every pause: at R over a limit L, a bucket of b tokens when the
// pause ends is spent in b/(R-L). Each refusal resumed at the plateau, 0.91
// of the rate refused, and the fleet stepped down by 0.91 an episode,
// refused every 4-7 s for 30 s at 1.1-1.5 times the limit (OS processes,
// answers in 5 ms). But the bucket is empty at each refusal, so the calls
// served from one episode's refusal to the next are at most what the
// provider let through in that span, L times it: all of it when the pause
// refilled no more than the bucket holds (a pause of a second, a bucket of
// a second or more), less what the refill past the bucket's size lost
// otherwise. So a refusal whose run from the pause's end lasted cycleRun or
// more, within excuseSpan of the last episode, resumes at cycleLevel of the
// key's calls served over the span from that episode (State.cycOK), when
// that is under the plateau of the rate refused and at least confirmedCut
// of it: at or under the limit, and at it for a bucket of seconds. Only at
// a rate that held since the last decrease (within cycleSteady of the rate
// it left): calls served while the rate grew back after it say less than
// the provider served. The price: at a bucket smaller than a pause's
// refill, the count is a floor a few per cent under the limit (issue 18,
// a limit rising to 100/s at a bucket of a tenth of a second: 93/s where
// the plateau rule held 96/s), until a probe.
const (
	cycleRun    = 2_000_000 // µs
	cycleLevel  = 0.99
	cycleSteady = 1.05
)

// chainMargin is how far under the rate it resumed at a key recovers to
// after a second refusal chained soon after its pause in a row (the plateau
// under that rate, times chainMargin): three episodes within a few seconds
// cost four refusals or so, with the calls in flight, and a provider that
// bans after five in 10 s bans at the next. Issue 18, two OS processes
// against a bucket that states the milliseconds to its next token and bans
// so: at the halving, episodes at 0.97, 0.88 and 0.64 of the old limit's
// rates (four refusals in 0.8 s) left the fleet at 0.82 of the new limit,
// recovering to the plateau under the rate the last resumed at, 1.02 of
// it, which was refused 5.4 s later: a ban.
const chainMargin = 0.95

// chainGrew is how far past the rate it resumed at a key's rate grows
// before a chained refusal for the level under the rate resumed to be a
// guess, probed after Hold alone (State.exitLevel): a refusal of the rate
// resumed at comes at once, with the rate near it. Issue 18, a saturated
// machine: resumed at 45/s after the limit halved to 50/s, refused at
// 57/s under 2 s after the pause, and held at 41/s for 25 s.
const chainGrew = 1.15

// cycleRate returns the key's rate served from the last episode of
// refusals to a refusal, with a Retry-After, of a call sent at sent after
// the pause that ended at prevPause (see cycleRun), or 0 when it says
// nothing more than the plateau.
//
// Not after a held refusal (State.excused), at or under the rate held: the
// count is the provider's rate only when the run drained its bucket, at a
// rate over its limit; a rate the provider let pass for a sustainSpan
// before was refused by bunched sends or a limit that fell, and the calls
// sent at it over the span read the rate itself times the share of the
// span the pause left (issue 18, a saturated machine: held at 48/s of 50,
// refused, resumed at 46/s and refused again 2.5 s after the pause, the
// count read 32/s, and the fleet held 29/s for the rest of the run).
func (c *Controller) cycleRate(s *State, sent, prevPause int64) float64 {
	if s.refusedAt == 0 || prevPause == 0 || s.probing || sent-prevPause < cycleRun || s.rate > cycleSteady*s.cutTo {
		return 0
	}
	if s.excused > 0 && s.rate <= s.excused {
		return 0
	}
	est := c.spanRate(s, sent)
	if est >= c.plateau*s.rate || est < confirmedCut*s.rate {
		return 0
	}
	return est
}

// spanRate returns the key's rate served (calls a second) from the last
// episode of refusals to a call sent at sent, or 0 when no episode began
// within excuseSpan: at most the provider's rate, as its bucket is empty
// at each refusal (see cycleRun).
func (c *Controller) spanRate(s *State, sent int64) float64 {
	if s.refusedAt == 0 {
		return 0
	}
	span := sent - s.refusedAt
	if span <= 0 || span > excuseSpan {
		return 0
	}
	return float64(s.cycOK) / (float64(span) / sec)
}

// agreedRate returns the rate served over the span from the last episode to
// a refusal of a call sent at sent when the last episode read the same
// (within agreeSpread), or 0. The calls served between two refusals are
// what the bucket held when the pause ended and the limit L times the run
// after it: b + L x run, the pause's refill b at most its size and L times
// the pause; over the span, pause and run, a floor of L, and L itself
// when the bucket refilled in full. A bucket smaller than the pause's
// refill reads b/span more than L x run/span, and the runs of two episodes
// at different rates differ (b/(R-L)), so only at L do they agree. Issue
// 18, a bucket of a second at 100/s (OS processes, answers in 5 ms): the
// slow start's end at 4 times the limit, then two chained refusals each
// cut by 0.64 from 2.8 and 2.2 times it, each episode read 100/s; the
// fourth episode brought the fifth refusal, and a ban. Only for two
// refusals chained soon after their pauses (runs under chainWindow), at
// rates agreeApart or more apart: over long runs, or at the same rate,
// the reads of a small bucket agree too (b + L x run over run + pause
// tends to L x run/(run+pause) as the run grows; issue 18, a saturated
// machine: runs of 3.5 and 6.3 s at a bucket of a tenth of a second read
// 0.80 and 0.88 of the limit, and the fleet held 76/s of 100). Not below
// agreeFloor of the rate refused, and not when either episode was another
// process's refusal heard of after a pause shorter than heardPause (heard,
// State.cycHeard; heardRead): the key's calls served are then its share of
// a floor of the fleet's rate, since so short a pause refills little of
// the bucket, and two such shares agree by chance (issue 18, two processes
// against a bucket of a tenth of a second whose refusals of a few
// milliseconds paused the fleet 150 ms: at the halving the process that
// heard of both chained refusals read 20/s twice, its share of a limit of
// 50, and held there for 10 s, while the other, whose reads differed,
// recovered to 26/s; the fleet re-converged in 11-12 s where it took 2).
// After a pause of a second, as a bucket of a second refills in full, each
// process's share of the fleet's calls served is its share of the limit,
// and the fleet's levels add up to it.
func (c *Controller) agreedRate(s *State, sent int64, heard bool) float64 {
	if heard || s.cycHeard {
		return 0
	}
	prev := s.cycEst
	est := c.spanRate(s, sent)
	if prev <= 0 || est <= 0 || est < agreeFloor*s.rate || math.Abs(est-prev) > agreeSpread*max(est, prev) ||
		math.Abs(s.rate-s.cycFrom) < agreeApart*max(s.rate, s.cycFrom) {
		return 0
	}
	return min(est, prev)
}

// heardPause (µs) is the pause under which another process's refusal,
// heard of, reads no rate (agreedRate).
const heardPause = 500_000

// heardRead reports whether a refusal is another process's, heard of from
// the store (outbound tells it as Failed), after a pause shorter than
// heardPause: the last one's, which ended at prevPause and began with the
// episode at State.refusedAt.
func heardRead(s *State, in Sample, prevPause int64) bool {
	return in.Outcome == Failed && prevPause > s.refusedAt && prevPause-s.refusedAt < heardPause
}

const (
	agreeSpread = 0.1
	agreeApart  = 0.15
	agreeFloor  = 0.25
)

// heldRefusal reports whether a refusal that begins a new episode at now,
// for a request sent at sent, came at a level the key held (see
// sustainSpan): it came with a Retry-After to a key with a plateau, not
// soon after the last pause (prevPause, its end) nor in slow start, at a
// rate no higher than the one the key sustained, and excuseSpan or more
// after the last throttle signal. It is excused when the caller's calls
// left in bunches (Sample.Bunched), and cuts to the plateau otherwise; a
// refusal soon after its pause halves the rate it came at.
func (c *Controller) heldRefusal(s *State, now, sent, prevPause int64, reason Reason, in Sample) bool {
	if in.RetryAfter <= 0 || c.plateau == 0 || (reason != ReasonThrottled && reason != ReasonRetryAfter) {
		return false
	}
	if prevPause > 0 && sent-prevPause <= chainWindow {
		return false // refused again soon after a pause: the limit fell
	}
	if s.probing || s.sus <= 0 || s.rate > s.sus*(1+1e-9) {
		return false
	}
	return s.refusedAt == 0 || now < s.refusedAt || now-s.refusedAt >= excuseSpan
}

// sustain records a success at now at the current rate: the lowest rate of
// a sustainSpan with enough successes (a quarter of that rate's calls, so
// that an idle key proves nothing) is sustained.
func (s *State) sustain(now int64) {
	if s.susFrom == 0 || now < s.susFrom {
		s.susFrom, s.susLow, s.susN = now, s.rate, 0
	}
	s.susLow = min(s.susLow, s.rate)
	s.susN++
	if now-s.susFrom >= sustainSpan {
		if float64(s.susN) >= s.susLow*sustainSpan/sec/4 {
			s.sus = max(s.sus, s.susLow)
		}
		s.susFrom, s.susLow, s.susN = now, s.rate, 0
	}
}

// refusedAfterLatency reports whether a throttle signal (reason) follows a
// decrease the latency alone asked for (State.queued): it is news, within
// the cooldown or for a call sent before that decrease. A latency cut says
// a queue formed, not that the rate is over the limit, and it cuts less
// than a refusal asks (issue 18, OS processes against answers in 20-70
// ms: a queue read cut one process 0.39 s before the other was refused
// with a Retry-After; the pause it heard of came within the cooldown, its
// rate stayed, and the fleet resumed at 1.25 times the limit, and was
// refused again).
func (c *Controller) refusedAfterLatency(s *State, reason Reason) bool {
	return s.queued > 0 && reason != ReasonLatency && reason != ReasonQueue
}

// addSat returns now + d for d > 0, saturating at math.MaxInt64 so that a
// huge Retry-After pauses the key for ever rather than not at all.
func addSat(now, d int64) int64 {
	if now > 0 && d > math.MaxInt64-now {
		return math.MaxInt64
	}
	return now + d
}

// newEpisode reports whether a bad signal about a request sent at sent is
// news: the request left after the last decrease, and the cooldown is over
// or the request left after the pause that ended at prevPause, which came
// with that decrease or after it and shed load (over sharePause; a short
// one, such as outbound's 150 ms for a provider that states the
// milliseconds to its next token and bans: the request was sent at the rate
// the decrease left, after the calls in flight at the old one were
// answered). A pause of a few milliseconds sheds nothing: the refusals
// after it are the same rate's, and the served share sizes their cut.
func (c *Controller) newEpisode(s *State, now, sent, prevPause int64) bool {
	if s.lastDecrease == 0 {
		return true
	}
	if sent < s.lastDecrease {
		return false
	}
	return now >= s.lastDecrease+c.cooldown || (prevPause > s.lastDecrease+sharePause && sent >= prevPause)
}

// cut decreases the rate multiplicatively and starts a new episode; a
// failed probe above a proven plateau returns to the plateau instead.
func (c *Controller) cut(s *State, now int64, f float64, queue int64) {
	s.drained = false
	if s.good > 0 && s.rate > s.good && (s.rate <= probeSpan*s.good || !s.ramp) {
		// The limit lies between the plateau, which held for a whole
		// hold, and the probe: back to the plateau, and hold longer
		// before the next probe. A probe that failed at once says the
		// plateau was only just under the limit, if at all. (A
		// provider's burst lets a pace over its limit pass a while,
		// and a key that sends less than it may is not refused: one
		// refused before it ramped found no limit that rose, however
		// far past probeSpan it got.)
		if s.rate <= probeEarly*s.good {
			s.good = max(probeLower*s.good, c.floor)
		}
		// The level that held is the peak of this run of decreases:
		// trouble at it soon after must not recover above it.
		s.peak, s.rate = s.good, s.good
		s.held, s.level = true, now
		if queue == 0 {
			// Refused: each probe costs a pause, and a limit
			// that did not move is probed ever less often.
			s.backoff = min(s.backoff+1, maxHoldShift)
		} else {
			// Found by a queue: the calls the probe sent over the
			// limit wait at the provider, and at the plateau, a few
			// per cent under the limit, they drain over seconds,
			// every call behind them slow. Go under the plateau by
			// as much as drains the wait in drainSpan, then back to
			// it (grow). No longer hold: the probe cost a few
			// slow answers and no pause, and a limit that rose
			// since is found only by the next probe (issue 18,
			// slowdown rising from 50/s to 100/s: a doubled hold
			// found it 24 s after the rise, one hold 11-17 s).
			s.rate = max(s.good*drainCut(queue), c.floor)
			s.drained = s.rate < s.good
		}
	} else {
		s.good, s.backoff = 0, 0
		if s.lastDecrease == 0 || now-s.lastDecrease > chainWindow || s.rate > s.cutTo {
			// A new run of decreases: the first, a late one, or one
			// after the rate grew again (trouble found below the old
			// Peak).
			s.peak = s.rate
		}
		s.rate = max(s.rate*f, c.floor)
		s.held, s.level = s.level != 0, 0
	}
	s.cutTo = s.rate
	s.probing, s.ramp, s.excused, s.exitLevel, s.banRate = false, false, 0, false, 0
	s.epOK, s.epRef, s.winCap, s.winAt, s.winRef = 0, 0, 0, 0, 0
	s.winSec, s.winFleet = 0, 0
	s.lastDecrease = now
	s.n = 0 // the p95 needs fresh evidence before it may cut again
}

// success records a success's latency at now and returns ReasonLatency
// when the p95 says the provider is slowing down.
func (c *Controller) success(s *State, now, latency int64) Reason {
	if c.ignoreLatency {
		return ReasonNone
	}
	s.ring[s.next] = latency
	s.next = (s.next + 1) % RingSize
	s.n = min(s.n+1, RingSize)
	s.base.Add(now, latency)
	if c.target == 0 && s.lastDecrease == 0 && s.n <= minP95Samples {
		// Learning the target: one early latency (a cached answer, a
		// warm connection) is no baseline for a provider whose usual
		// latency is several times it, so take the median of the first
		// few, and judge none of them slow.
		s.targetAt = now
		s.target = max(float64(median(s)), 1)
		return ReasonNone
	}
	if s.target == 0 {
		s.targetAt = now
		if c.target > 0 {
			s.target = c.target
		} else {
			s.target = max(float64(latency), 1)
			return ReasonNone
		}
	}
	if base := s.base.Value(); c.queue > 0 && s.n >= minP95Samples && base > 0 {
		c.idleSpread(s)
		// A queue builds up: the median call waits behind others.
		// A queue that drains after a decrease (a falling median) is
		// the decrease working, not news.
		if m := recentMedian(s); s.rate > c.floor && m > 0 && latency >= m {
			// The wait: the median less the provider's own scatter.
			if wait := m - s.queueSpread(); float64(wait) > c.queue*float64(base) && !draining(s) && !s.tail(now, latency) && queuedCalls(s, wait) >= QueueCalls {
				if c.scatter(s, now, m) {
					return ReasonNone
				}
				return ReasonQueue
			}
		}
	}
	if float64(latency) <= c.factor*s.target {
		c.learn(s, now, latency)
		return ReasonNone
	}
	if s.queued > 0 && (draining(s) || s.tail(now, latency)) {
		// Still draining the queue the last decrease answered: slow
		// calls are its tail, not news.
		return ReasonNone
	}
	if p95 := s.P95(); s.n >= minP95Samples && float64(p95) > c.latencyBound(s) && latency >= median(s) {
		if s.rate <= c.floor {
			// Nothing left to shed: a provider slow at the floor is
			// slow, and this is its new normal.
			c.learn(s, now, latency)
			return ReasonNone
		}
		if queuedCalls(s, p95) >= QueueCalls {
			return ReasonLatency
		}
	}
	if queuedCalls(s, latency) < QueueCalls {
		// Slow by the ratios, but no queue of the key's calls (one
		// wait for a service slot, or a provider slow at a low
		// rate): a fast success, whose latency is the provider's
		// normal.
		c.learn(s, now, latency)
	}
	return ReasonNone
}

// tail reports whether a slow success at now, of latency µs, is the tail
// of the queue the last latency decrease answered (State.queued): it came
// within chainWindow of that decrease and waited less than the call that
// set it off. A queue drains at the limit less the rate cut to, which a cut
// of 10-20 % makes slow, and its calls stay slow for a second or more;
// each read as news, they cut again and again, and every cut after the
// rate grew back a little lowered the run's peak, the level recovery aims
// at (issue 18: on a saturated machine, one burst's queue at a slowdown
// provider cut each process three times, the fleet from 101/s to 66/s,
// and the level held there for 13 s). A queue that still grows (the limit
// fell further than the cut) waits longer than the call that set the cut
// off, and is news.
func (s *State) tail(now, latency int64) bool {
	return s.queued > 0 && latency < s.queued && now >= s.lastDecrease && now-s.lastDecrease <= chainWindow
}

// prove records a call that succeeded at now at the current rate, slow or
// not: it proves the rate (LatencyFloor) for this BaseWindow and the next.
func (s *State) prove(now int64) {
	if s.provenAt == 0 || now < s.provenAt || now-s.provenAt >= BaseWindow {
		// A new window: the last one's highest stays proven until
		// this one has seen a higher one.
		s.proven, s.provenNext, s.provenAt = s.provenNext, 0, now
	}
	s.provenNext = max(s.provenNext, s.rate)
	s.proven = max(s.proven, s.rate)
}

// Fastest keeps the least of a series of values (µs) seen over the last
// one to two BaseWindows: the usual value, with nothing slow in it, that
// a success latency (Config.Queue) or a store's round trip (the outbound
// client's store jitter) is measured against. It forgets a value at most
// two windows after it was seen, so that it follows a provider or a store
// that has become slower for good. The zero value holds nothing. It is not
// safe for concurrent use.
type Fastest struct {
	// least is the fastest of this window and the last; next the fastest
	// of this one, which began at at (Unix µs).
	least, next, at int64
}

// Add takes v, seen at now (Unix µs), and returns the fastest (at least 1).
func (f *Fastest) Add(now, v int64) int64 {
	v = max(v, 1)
	if f.at == 0 || now < f.at || now-f.at >= BaseWindow {
		// A new window: the last one's fastest stays the base until
		// this one has seen something faster.
		if f.next > 0 {
			f.least = f.next
		}
		f.next, f.at = 0, now
	}
	if f.next == 0 || v < f.next {
		f.next = v
	}
	if f.least == 0 || v < f.least {
		f.least = v
	}
	return f.least
}

// Value returns the fastest value held (0 until Add).
func (f *Fastest) Value() int64 { return f.least }

// learn moves the latency target towards latency by LatencyWeight per
// second since the last update (at most LatencyWeight per sample). Weighing
// by time, not by sample, keeps a busy key's target from chasing a
// slowdown that builds up over a few seconds.
func (c *Controller) learn(s *State, now, latency int64) {
	dt := float64(now-s.targetAt) / sec
	s.targetAt = max(s.targetAt, now)
	w := c.weight * min(max(dt, 0), 1)
	s.target = (1-w)*s.target + w*max(float64(latency), 1)
}

// median returns the median of the last s.n latencies.
func median(s *State) int64 {
	return percentile(s, 50)
}

// ago returns the latency i successes before the latest (0: the latest),
// i < RingSize.
func (s *State) ago(i int) int64 {
	return s.ring[((s.next-1-i)%RingSize+RingSize)%RingSize]
}

// recentMedian returns the median of the last minP95Samples latencies (or
// of fewer, if fewer were added since the last decrease): the queue signal
// follows a queue as it builds, not a ring's worth of history.
func recentMedian(s *State) int64 {
	var buf [minP95Samples]int64
	n := min(s.n, minP95Samples)
	for i := range n {
		buf[i] = s.ago(i)
	}
	if n == 0 {
		return 0
	}
	v := buf[:n]
	slices.Sort(v)
	return v[(n-1)/2]
}

// scatterSpan (µs) is how soon after a latency decrease a queue that did
// not shorten shows the provider's scatter (see scatter).
const scatterSpan = 5_000_000

// scatter reports whether a queue read from the recent median m (µs) at
// now is the provider's own scatter, not a queue of the fleet's calls, and
// then learns it (State.spread): the last decrease was the queue's, soon
// before, and the rate is still under the one it cut, yet the median is
// no higher than it was then, while the fastest of the recent calls
// answers near the base (a queue delays every call behind it, the fastest
// too). A queue shortens when the rate falls under the provider's; a
// provider whose answers vary at random answers as slowly at any rate
// (issue 18: answers in 5 ms plus up to 20 ms at random read as a queue
// every second or two, and each cut the fleet again, to 0.45-0.77 of the
// limit with no refusal). How far the median and the 95th percentile of
// the answers since the decrease come over the fastest is learned, and
// from then on the latency rules allow for it, and the rate goes back to
// the one that decrease cut from (issue 18: a cost bucket paced to its
// stated limit at once, with answers in 5-25 ms, held 0.55-0.65 of it for
// 25 s after its first queue cuts). It is the way to learn a scatter for
// a key that never was at rest (a stated limit paced to at once); one
// measured at rest (idleSpread) stands.
func (c *Controller) scatter(s *State, now, m int64) bool {
	if s.queued == 0 || s.queueMed == 0 || now-s.lastDecrease > scatterSpan || s.rate >= s.queueFrom ||
		float64(m) > scatterSame*float64(s.queueMed) || float64(m) < scatterShed*float64(s.queueMed) {
		return false
	}
	base := s.base.Value()
	low := int64(math.MaxInt64)
	for i := range min(s.n, minP95Samples) {
		low = min(low, s.ago(i))
	}
	if s.restReads >= idleSpreadSamples || base <= 0 || low == math.MaxInt64 || 2*(low-base) > m-base || trended(s) || correlated(s) {
		return false
	}
	s.spread = max(s.spread, median(s)-base)
	s.spreadTail = max(s.spreadTail, s.P95()-base)
	// The decrease shed no queue: back to the rate it cut from, and
	// recovery aims at the level it aimed at before (issue 18: at 20-70
	// ms, a queue read soon after the slow start's refusals lowered the
	// peak from the fleet's 101/s to 78/s, and the fleet held 0.80 of
	// the limit for 10 s after the read was undone).
	ceil := c.ceilingFor(s)
	s.rate = max(s.rate, min(s.queueFrom, ceil))
	s.peak = max(s.peak, s.rate, min(s.queuePeak, ceil))
	if s.queueProbing && s.rate < ceil {
		// The read ended a slow start, which found no limit: it goes
		// on (issue 18: at 20-70 ms, both processes' slow starts
		// ended at 60-70/s of a limit of 100/s, and the fleet held
		// there for 10 s before its first probe).
		s.probing, s.ramp = true, s.queueRamp
	}
	return true
}

// idleSpread learns the provider's scatter (State.spread) at rest: in the
// slow start, before any decrease, while the fleet's rate (the key's over
// its share) times the fastest answer is under idleBusy, so that the
// key's calls seldom wait for each other, and the last scatterSamples
// answers come in no order (trended) and each is drawn afresh
// (correlated). How far those answers' median and 90th percentile come
// over the fastest is then the provider's own, and the scatter follows
// them as a moving average over about idleSpreadSamples reads. The reads
// are chosen by the rate alone: a bound on the latencies themselves would
// keep only the lucky ones.
//
// A provider answering in 5 ms plus up to 20 ms at random answers a
// median 10 ms over its fastest, at any rate: at 100/s, one call queued
// by the queue rule's measure. Learned while the slow start passed 50/s,
// the queue rule does not read it as a queue (issue 18: without it, the
// first such read after each refusal cut the fleet, and Retry-After
// providers sat at 0.63-0.84 of their limit). A provider that answers
// alike at rest teaches no scatter. One whose server takes longer a call
// than its fastest answer (sim's slowdown answering in 5 ms, serving 100
// calls a second one at a time) makes the fleet's calls wait for each
// other now and then even there: those waits are learned, a few
// milliseconds that its queue must pass before the rules read it. Only a
// slow start is taken for rest: later, at any rate, a queue's answers can
// pass for scatter (two processes' paced calls through one server answer
// in a sawtooth).
func (c *Controller) idleSpread(s *State) {
	if s.n < scatterSamples || s.lastDecrease != 0 {
		return
	}
	base := s.base.Value()
	r := s.rate
	if s.share > 0 {
		r /= s.share
	}
	if r*float64(base)/sec >= idleBusy || trended(s) || correlated(s) {
		return
	}
	// Of the answers trended judged (older ones may be a cold start's),
	// and not the 95th: of 16, that is the slowest, one outlier.
	med := max(lastPercentile(s, 50, scatterSamples)-base, 0)
	p90 := max(lastPercentile(s, 90, scatterSamples)-base, 0)
	if s.restReads == 0 {
		// It replaces whatever a queue read learned.
		s.spread, s.spreadTail = med, p90
	}
	s.spread += (med - s.spread) / idleSpreadSamples
	s.spreadTail += (p90 - s.spreadTail) / idleSpreadSamples
	s.restReads = min(s.restReads+1, idleSpreadSamples)
}

// idleBusy is the fleet's calls in flight, at the fastest answer's
// latency, under which its calls seldom wait for each other (see
// idleSpread): a single server that takes that long a call and is that
// busy delays a call by a sixth of it on average. idleSpreadSamples: see
// idleSpread.
const (
	idleBusy          = 0.25
	idleSpreadSamples = 4
)

// trended reports whether the last scatterSamples latencies move one way
// (Kendall's tau of latency against order beyond scatterTrend, or too few
// samples to tell): a queue builds or drains, calls in order, while a
// provider's scatter comes in any order.
func trended(s *State) bool {
	if s.n < scatterSamples {
		return true
	}
	var v [scatterSamples]int64
	for i := range scatterSamples {
		v[scatterSamples-1-i] = s.ago(i)
	}
	up, down := 0, 0
	for i := range scatterSamples {
		for j := i + 1; j < scatterSamples; j++ {
			switch {
			case v[j] > v[i]:
				up++
			case v[j] < v[i]:
				down++
			}
		}
	}
	pairs := scatterSamples * (scatterSamples - 1) / 2
	return math.Abs(float64(up-down)) > scatterTrend*float64(pairs)
}

// correlated reports whether each of the last scatterSamples latencies
// follows from the one before (or too few came to tell): their lag-1
// autocorrelation is over scatterCorr, or scatterSteps or more of their
// steps go the same way. A queue remembers: each call waits about as long
// as the one before it, less what was served meanwhile, and two streams
// of paced calls through one server answer in a sawtooth; a provider's
// scatter is drawn afresh for each call.
func correlated(s *State) bool {
	if s.n < scatterSamples {
		return true
	}
	var mean float64
	for i := range scatterSamples {
		mean += float64(s.ago(i))
	}
	mean /= scatterSamples
	var num, den float64
	for i := range scatterSamples {
		d := float64(s.ago(i)) - mean
		den += d * d
		if i > 0 {
			num += d * (float64(s.ago(i-1)) - mean)
		}
	}
	if den > 0 && num/den > scatterCorr { // den 0: all alike, nothing remembered
		return true
	}
	// A sawtooth whose teeth are a few calls wide shows little
	// correlation from one call to the next: most steps go one way.
	up, down := 0, 0
	for i := 1; i < scatterSamples; i++ {
		switch d := s.ago(i-1) - s.ago(i); {
		case d > 0:
			up++
		case d < 0:
			down++
		}
	}
	return max(up, down) >= scatterSteps
}

// scatterSamples and scatterTrend: see trended; scatterCorr and
// scatterSteps: see correlated. Of 16 answers drawn afresh, |tau| exceeds
// 0.3 about one time in ten, the autocorrelation 0.3 one in sixteen, and
// 12 of 15 steps go one way one in three thousand.
const (
	scatterSamples = 16
	scatterTrend   = 0.3
	scatterCorr    = 0.3
	scatterSteps   = 12
)

// maxSpread (µs) bounds a scatter a State from elsewhere may carry: more
// is damage, and would blind the queue rule.
const maxSpread = 10_000_000

// scatterSame is how much higher than at the last latency decrease the
// median may be and still be the same (see scatter).
const scatterSame = 1.1

// scatterShed is how far under its median at the last latency decrease a
// queue's median may fall and still show no queue shed: well under it,
// the decrease shed the queue, as it was meant to, whatever the order of
// the answers since (issue 18: two processes against a slowdown answering
// in 5 ms, on an idle machine, cut at a median of 230 ms when the limit
// halved; 3 s later their answers came in 10-40 ms in no order, a median
// of 23 ms read as the provider's scatter, which undid the cut and, learnt
// from answers still queued, hid the queue from then on: every answer
// slow for 8 s).
const scatterShed = 0.5

// draining reports whether the latencies are falling: the median of the
// newest half of the last minP95Samples is below that of the older half
// (false with fewer samples).
func draining(s *State) bool {
	const h = minP95Samples / 2
	if s.n < minP95Samples {
		return false
	}
	var newer, older [h]int64
	for i := range h {
		newer[i] = s.ago(i)
		older[i] = s.ago(h + i)
	}
	slices.Sort(newer[:])
	slices.Sort(older[:])
	return newer[(h-1)/2] < older[(h-1)/2]
}

// P95 returns the 95th percentile (nearest rank) of the latencies (µs) of
// the successes since the last decrease (at most the last RingSize), 0
// before any. With Config.IgnoreLatency no latency is kept: always 0.
func (s *State) P95() int64 {
	return percentile(s, 95)
}

// queueSpread is what the queue rule takes off the recent median for the
// provider's own scatter (State.spread): half way from the scatter's
// median to its tail. The median of eight answers drawn from a scatter
// varies by about a quarter of its width, and its highs are no queue.
func (s *State) queueSpread() int64 {
	return s.spread + max(s.spreadTail-s.spread, 0)/2
}

// latencyBound is the p95 latency (µs) past which the latency rule reads
// a slowdown: LatencyFactor times the target or, when higher, the fastest
// answer plus the scatter's tail (State.spreadTail) plus Queue times the
// fastest answer (issue 18: answers in 5 ms plus up to 20 ms at random
// have a p95 of 24 ms against a bound of 30 ms, and the least queue
// crossed it).
func (c *Controller) latencyBound(s *State) float64 {
	if s.spreadTail == 0 {
		return c.factor * s.target
	}
	base := float64(s.base.Value())
	return max(c.factor*s.target, base+float64(s.spreadTail)+c.queue*base)
}

// percentile returns the p-th percentile (nearest rank) of the last s.n
// latencies.
func percentile(s *State, p int) int64 {
	return lastPercentile(s, p, RingSize)
}

// lastPercentile returns the p-th percentile (nearest rank) of the last k
// latencies (fewer if fewer were added since the last decrease), k <=
// RingSize.
func lastPercentile(s *State, p, k int) int64 {
	var buf [RingSize]int64
	n := min(max(s.n, 0), k, RingSize)
	if n == 0 {
		return 0
	}
	for i := range n {
		buf[i] = s.ago(i)
	}
	v := buf[:n]
	slices.Sort(v)
	rank := max((p*len(v)+99)/100, 1) // ceil(p/100 n)
	return v[rank-1]
}

// fast reports whether a success of latency earns an increase: it is
// under the latency ratios, or it waited behind less than QueueCalls of the
// key's calls (a wait for one service slot is no queue).
func (c *Controller) fast(s *State, latency int64) bool {
	latency -= s.spreadTail // the provider's own scatter is no queue
	if c.ignoreLatency || queuedCalls(s, latency) < QueueCalls {
		return true
	}
	if c.queue > 0 && s.base.Value() > 0 && float64(latency) > c.queue*float64(s.base.Value()) {
		return false // it waited in a queue: no reason to send faster
	}
	return s.target == 0 || float64(latency) <= c.factor*s.target
}

// queuedCalls estimates how many of the key's calls wait in the provider's
// queue when its calls take latency (µs): rate x (latency - base), as TCP
// Vegas measures a backlog (see QueueCalls). The base is the fastest recent
// success, or the latency target when that is lower (anchored by
// Config.LatencyTarget or State.CapTarget: a caller that knows the
// provider's normal latency, or a slowdown that lasted longer than the
// base remembers). With neither known it is unknown: +Inf, which leaves
// the decision to the latency ratios.
func queuedCalls(s *State, latency int64) float64 {
	base := float64(s.base.Value())
	if s.target > 0 && (base <= 0 || s.target < base) {
		base = s.target
	}
	if base <= 0 {
		return math.Inf(1)
	}
	r := s.rate
	if s.share > 0 {
		r /= s.share // the fleet's rate: the queue is the fleet's
	}
	return r * max(float64(latency)-base, 0) / sec
}

// ShareTTL (µs) is how long a share told by FleetShare counts. outbound
// measures it every few seconds; one not renewed (the store stopped
// answering, the fleet went quiet) lapses, and the key's own rate alone
// stands for the queue's arrivals again.
const ShareTTL = 30_000_000

// FleetShare tells the controller which share of the calls sent by the
// whole fleet sharing the key (every process that adapts its own rate
// for it) is this process's: its calls answered in a recent clock second
// over the fleet's in that second, in (0, 1]. A provider's queue is the
// fleet's: each of N processes sending at its share sees a wait that
// holds N times its own calls, and QueueCalls of its own came only once
// the fleet's queue held N calls (issue 18: two processes against a
// slowdown answering in 5 ms were cut at a median of 42 ms, past the 35
// ms the figures count as slow, and every probe left 20 to 40 slow
// answers). With a share told, the queue is counted at the fleet's rate,
// the key's over its share, for ShareTTL. A share outside (0, 1] is
// ignored when it is not a positive number, and one over 1 counts as 1.
func (c *Controller) FleetShare(s *State, now int64, share float64) {
	c.start0(s)
	if !(share > 0) || math.IsInf(share, 0) {
		return
	}
	s.share, s.shareAt = min(share, 1), now
}

// Share returns the fleet share FleetShare told, as of the last
// observation (0: none or lapsed; the key counts as the whole fleet).
func (s *State) Share() float64 {
	return s.share
}

// grow raises the rate for the time since the last increase, at most one
// second of it (a key idle for an hour does not jump).
func (c *Controller) grow(s *State, now int64) bool {
	if s.lastIncrease == 0 || now <= s.lastIncrease {
		s.lastIncrease = max(s.lastIncrease, now)
		return false
	}
	// Time paused by a Retry-After does not count either: a success then
	// is a call sent before the throttle, and the first one after the
	// pause earns only the time since it ended.
	from := max(s.lastIncrease, min(s.pausedUntil, now))
	if now <= from {
		s.lastIncrease = now
		return false
	}
	dt := min(float64(now-from)/sec, 1)
	s.lastIncrease = now
	ceil := c.ceilingFor(s)
	if s.rate >= ceil {
		return false
	}
	if c.usage > 0 && s.useKnown && s.rate >= c.usage*s.useRate {
		return false // application-limited: the rate is not what binds
	}
	old := s.rate
	goal := c.plateauOf(s.peak)
	if c.plateau > 0 {
		if s.held {
			// Trouble found only after holding at the plateau: the
			// limit is just under it, closer than a cut found while
			// growing says. Level off at half the distance.
			goal = (1 + c.plateau) / 2 * s.peak
		}
	}
	if s.good > 0 {
		// Back from a failed probe: the proven plateau is the level.
		goal = min(goal, s.good)
		if s.drained && s.rate >= s.good {
			s.drained = false // drained and back
		}
		if s.drained {
			// Under it while the probe's queue drains: the
			// plateau itself, which held for a whole hold.
			goal = s.good
		}
	}
	if s.winCap > 0 {
		// The count of a window aligned to the clock (windowLate):
		// the read set the rate to it (capWindow).
		goal = min(goal, s.winCap)
	}
	if s.stated && s.hint > 0 {
		// The throttle came with the provider's (new) sustainable
		// rate, which explains it: recover to that rate, not to a
		// plateau under it.
		goal = max(goal, ceil)
	}
	if s.level != 0 && !s.probing && goal > s.rate*(1+levelGap) {
		// The goal rose well above the level the rate held (a window's
		// count that a fleet's count refuted): the rate recovers
		// again, and the level it arrives at is a new one, which holds
		// a whole hold before it is proven and probed above; trouble
		// on the way is not trouble at a held level (issue 18: on a
		// saturated machine a process capped at a misread window for
		// 4 s recovered from 31 to 53 in a second once refuted, with
		// its level still the cap's; refused there, it was cut as if
		// it had held 53, and would otherwise have probed as soon as
		// it arrived).
		s.level = 0
	}
	switch {
	case s.probing && s.ramp:
		s.rate += s.rate * min(c.slowStart, rampGrowth) * dt
		if s.banRate > 0 && s.rate >= c.plateauOf(s.banRate) {
			// Back near the rate the last ban came at: level off
			// under it, hold, and probe gently above it (from no
			// proven plateau: the one held before the ramp was the
			// ban's quarter).
			s.rate, s.peak = max(old, c.plateauOf(s.banRate)), s.banRate
			s.probing, s.ramp, s.good, s.level, s.banRate = false, false, 0, now, 0
		}
	case s.probing:
		s.rate += s.rate * c.slowStart * dt
	case s.rate < goal && s.stated && s.hint > 0 && s.hint == s.hintLow && s.queued == 0:
		// Back from a throttle (not a latency cut: queued) that came
		// with the provider's new, lower sustainable rate (not raised
		// since): the rate is
		// known, as on a first answer that states it, and the pause
		// the throttle asked for has passed. Pace to it at once, with
		// no approach (issue 18: an IETF provider that halved its
		// stated quota was back at it only 4 s after its refusal, on
		// a busy machine, a second of calls short).
		s.rate = min(goal, ceil)
	case s.rate < goal:
		// Fast recovery: close the gap to the last good level by
		// 1-1/e a second, but never faster than slow start would. The
		// approach is asymptotic, so within 1% it arrives, and the
		// additive increase takes over instead of creeping ever closer.
		s.rate += min(goal-s.rate, s.rate*max(c.slowStart, 1)) * dt
		if goal-s.rate <= goal/100 {
			s.rate = goal
		}
	case c.plateau > 0 && s.level == 0:
		// Arrived at the plateau: hold there before probing.
		s.level = now
	case c.plateau > 0 && now-s.level < c.holdFor(s):
		// Holding near the last cut.
	default:
		if c.plateau > 0 && s.good == 0 {
			// Held for a whole hold without trouble: proven.
			s.good = s.rate
		}
		inc := c.increase
		if inc == 0 {
			inc = DefaultIncreaseFraction * max(s.peak, s.rate)
		}
		if s.good > 0 && c.slowStart > 0 {
			// A probe above the proven plateau grows by probeGrowth
			// times itself a second (at least by the additive
			// increase, and no faster than slow start): it passes
			// probeSpan within a second or so, where the additive
			// increase took 5 s. Without slow start (SlowStart < 0)
			// the increase stays additive, as asked.
			inc = max(inc, min(probeGrowth, c.slowStart)*s.rate)
		}
		s.rate += inc * dt
		if ref := probeSpan * max(s.good, s.over); s.good > 0 && s.rate > ref && c.slowStart > 0 && s.useKnown && s.useRate > ref {
			// Past the span a probe fails in, with no trouble, and
			// served that fast for a whole second (a provider's
			// burst lets a pace over its limit pass for a while; a
			// key sending less than it may proves nothing): the
			// limit rose. Find it as a slow start would, gently.
			s.probing, s.ramp = true, true
		}
	}
	if s.rate >= ceil {
		s.rate = ceil
		s.probing, s.ramp = false, false
	}
	return s.rate > old
}

// drainSpan (µs) is how soon a probe that a provider's queue failed has
// its queue drained: the rate goes under the proven plateau by the wait
// over drainSpan, and recovers to it from there (issue 18: against a
// provider that slows down instead of refusing, answering in 5 ms, a
// probe failed at a wait of 20-30 ms went back to the plateau, 3 % under
// the limit, and the 1-2 calls the probe had queued drained at 1.5 calls a
// second: 16 answers over 35 ms, slow by the figures, in the second
// after).
const drainSpan = 250_000

// drainCut returns the factor that drains a queue whose calls wait wait µs
// in drainSpan, at least 0.5: at the fleet's rate r the queue holds r x
// wait calls, and r x (1-f) fewer a second drain it in wait/(1-f).
func drainCut(wait int64) float64 {
	return max(0.5, 1-float64(wait)/drainSpan)
}

// holdFor returns how long (µs) the rate holds at its level before a
// probe above it: Hold, doubled for every failed probe since the level was
// proven, and at least probeCost times the last pause, so that probing
// costs a few per cent of the time. The first level after slow start
// holds for Hold alone (State.exitLevel).
func (c *Controller) holdFor(s *State) int64 {
	h := c.hold << s.backoff
	if s.exitLevel {
		return h
	}
	return max(h, probeCost*s.pause)
}

// Extend pauses the key until until (Unix µs) if it is not paused that
// long already, with no decrease: the tail of a pause already accounted
// for, such as the Retry-After of calls that were in flight when the first
// refusal came, heard from another process.
func (c *Controller) Extend(s *State, until int64) {
	c.start0(s)
	s.pausedUntil = max(s.pausedUntil, until)
}

// Locked is a Controller and one key's State behind a mutex. It is safe for
// concurrent use; its zero value is not usable, use NewLocked.
type Locked struct {
	c  *Controller
	mu sync.Mutex
	s  State
}

// NewLocked returns a Locked key at its conservative start.
func NewLocked(c *Controller) *Locked {
	return &Locked{c: c, s: c.Init()}
}

// Observe applies a sample at now (Unix µs).
func (l *Locked) Observe(now int64, in Sample) Decision {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Observe(&l.s, now, in)
}

// Rate returns the current rate and, when a Retry-After pauses the key at
// now, until when.
func (l *Locked) Rate(now int64) (rate float64, pausedUntil int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	until, paused := l.s.Paused(now)
	if !paused {
		until = 0
	}
	return l.s.rate, until
}

// State returns a copy of the state.
func (l *Locked) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.s
}

// Fresh reports whether dropping s at now (an idle key's eviction) gives
// nothing away: the key is not paused, and its rate is at least Start, so a
// fresh key would not send faster than this one may.
func (c *Controller) Fresh(s *State, now int64) bool {
	if !s.started {
		return true
	}
	_, paused := s.Paused(now)
	return !paused && s.rate >= c.start
}

// windowLevel is the share of a window's count, read from the calls a key
// served in a clock second (capWindow), that it paces at: the count is
// measured, not guessed from a rate refused, so the level sits closer to
// it than a plateau does. Each process paces its share of the count, and a
// second holds a call more or less of each, so 3 % spare keeps the fleet
// under it (issue 18, real processes against a clock window of 100
// answering in 5 ms: 96-98 served a second, no refusal; at (1+Plateau)/2,
// 0.955, a run's level of 95 missed the goal of 0.95 of the limit).
const windowLevel = 0.97

// levelGap is how far (a fraction of the rate) the recovery goal must rise
// above a level the rate holds for the level to count as left (grow): more
// than the 5 % between a plateau and the half-way level a held refusal
// aims at, so that only a bound lifted (a refuted window) starts it anew.
const levelGap = 0.1

// capWindow sets the rate, and bounds the recovery until a probe, to the
// count of a window aligned to the clock (windowLate): windowLevel of the
// key's calls served in the second of the refusal that showed it (winN),
// clock second k (Unix s), in which the fleet's calls served were fleet
// (0: not known yet; FleetCount learns it).
// The count is measured, so the level is the count's, down or up: a
// plateau under the rate the episode's cut left held a fleet at 0.91 of
// the count, and recovering to it from that cut took 4-5 s (issue 18,
// real processes against a clock window answering in 5 ms). It reports
// how the rate changed.
func (c *Controller) capWindow(s *State, k int64, fleet int) Change {
	s.winCap = windowLevel * float64(s.winN)
	s.winSec, s.winFleet, s.winRead = k, fleet, true
	// The level is the window's, not a guess from a slow start's
	// overshoot: it holds as any level does before a probe.
	s.exitLevel = false
	r := s.rate
	s.rate = c.clampRate(max(s.winCap, c.floor))
	s.cutTo = s.rate
	switch {
	case s.rate < r:
		return Decreased
	case s.rate > r:
		return Increased
	}
	return Unchanged
}

// plateauOf returns the level under rate r that recovery aims at: Plateau
// times it, or Decrease times it without a plateau.
func (c *Controller) plateauOf(r float64) float64 {
	if c.plateau > 0 {
		return c.plateau * r
	}
	return c.decrease * r
}

// lateRefusal notes a refusal with a Retry-After of a call sent at sent
// (Unix µs) at rate0, the key's own (Throttled) or another process's
// pause heard of from the store (outbound's notePause: Failed, no
// latency), when it came late in a clock second after at least
// confirmedCut of the rate was served in it: a window's count spent, if
// the key's calls in flight are refused too (windowLate), or if an
// earlier such refusal served the same count at a rate well apart
// (windowSame; for a key that knows of no other process sharing its
// limit: with one, only the fleet's counts show it, FleetCount), when it
// caps the level and reports whether it lowered the rate. Not news when the episode began with another process's pause,
// heard of first: the key's own refusals still show the window. A pause
// of a few milliseconds (sharePause) is a token's wait, not the rest of a
// window: a bucket far over its limit refuses call after call, as a spent
// window does (issue 18: read so, a provider stating its waits to the
// millisecond held the fleet at 0.92-0.94 of it in 1 of 5 runs of a
// virtual table).
func (c *Controller) lateRefusal(s *State, now, sent int64, rate0 float64, in Sample) bool {
	heard := in.Outcome == Failed
	if in.RetryAfter <= sharePause || c.plateau == 0 || s.winCap != 0 || (!heard && s.winAt != 0) {
		return false
	}
	if heard && sent/int64(sec) == s.clockSec+1 && sent%int64(sec) < heardLag(rate0) {
		// Heard of just after the second turned: the other process
		// was refused in the second before (it is heard of when the
		// key next tries to send).
		sent = (s.clockSec+1)*int64(sec) - 1
	}
	n := s.windowServed(sent)
	if n == 0 || float64(n) < lateShare*rate0 {
		return false
	}
	low := float64(n) < confirmedCut*rate0
	if s.winKnown && !low {
		// The provider's windows are known: this one's count was
		// spent, at a limit that changed (see windowSpan).
		return c.windowRead(s, sent/int64(sec), n, 0) == Decreased
	}
	if !heard && !low {
		s.winAt, s.winSeen, s.winN, s.winRef = sent, now, n, 0
	}
	r := lateRec{at: now, sec: sent / int64(sec), part: sent % int64(sec), n: n, rate: rate0, low: low, heard: heard}
	if !r.shows(s.late, r.n, s.late.n) {
		if r.sec == s.late.sec {
			r.fleet = s.late.fleet
		} else {
			s.prevLate = s.late
		}
		s.late = r
		return false
	}
	if heard || s.late.heard || (s.share > 0 && s.share < 1) {
		// The key shares its limit with other processes: its own
		// counts are its shares of the fleet's, and two of them
		// agree by chance as well as by a window (issue 18, token
		// buckets: a process that heard of the other's pause at a
		// slow start's end had served 36 calls of that second, and
		// 36 of another 2 s later at a rate 30 % lower; read as a
		// window, it held the fleet at 0.88-0.92 of the limit for
		// 24 s). Only the fleet's counts of the two seconds show a
		// window (FleetCount): a bucket's grow with the point of the
		// second its refusal came at, a window's do not.
		s.prevLate, s.late = s.late, r
		return false
	}
	// The same count served in two seconds at rates well apart: the
	// key's share of a window's.
	return c.windowRead(s, r.sec, n, 0) == Decreased
}

// windowRead levels the key at windowLevel of n, its share of a window's
// count read from two episodes (or one, once windows are known) in clock
// second k, where the fleet's count was fleet (0: not known), and reports
// how the rate changed.
func (c *Controller) windowRead(s *State, k int64, n, fleet int) Change {
	s.winN, s.late, s.prevLate, s.winKnown = n, lateRec{}, lateRec{}, true
	return c.capWindow(s, k, fleet)
}

// lateRec is a refusal with a Retry-After late in its clock second, after
// at least lateShare of the rate was served in it (lateRefusal).
type lateRec struct {
	at   int64 // when it came (Unix µs; 0: none)
	sec  int64 // the clock second (Unix s) its call was sent in
	part int64 // how far into that second (µs)
	// n is how many of the key's calls sent in that second before it
	// were served, fleet how many the whole fleet's were (FleetCount; 0:
	// not known).
	n, fleet int
	rate     float64 // the rate it came at
	low      bool    // n was under confirmedCut of rate
	heard    bool    // another process's refusal, heard of from the store
}

// shows reports whether r and e, an earlier record, show a window, their
// counts being a and b (the key's own, or the fleet's): within windowSpan,
// in different seconds, after the same count (windowSame) at rates apart
// (windowRates), and, if either came after less than confirmedCut of its
// rate, at points of their seconds apart (windowApart).
func (r lateRec) shows(e lateRec, a, b int) bool {
	return e.at != 0 && r.at-e.at <= windowSpan && r.sec != e.sec && a > 0 && b > 0 &&
		math.Abs(float64(a-b)) <= windowSame*float64(max(a, b)) &&
		math.Abs(r.rate-e.rate) >= windowRates*max(r.rate, e.rate) &&
		(!r.low && !e.low || abs64(r.part-e.part) >= windowApart)
}

// LateSecond returns the clock second (Unix s) of the key's latest refusal
// with a Retry-After late in its second that the window read keeps (0:
// none), and how many of the key's calls sent in that second were served
// before it: the key's share, which a process tells the rest of its fleet
// through a store (outbound), so that each can learn the fleet's count of
// that second (FleetCount). Once a window's count caps the key, and the
// fleet's count of the second it was read in is not known yet, it returns
// that second and the key's count in it instead: the fleet's count is what
// a later second's can refute (FleetCalls).
func (s *State) LateSecond() (sec int64, served int) {
	if s.winCap > 0 && s.winFleet == 0 && s.winSec > 0 {
		return s.winSec, s.winN
	}
	return s.late.sec, s.late.n
}

// FleetCount tells the controller how many calls the whole fleet sharing
// the key (every process, this one's included) had served in clock second
// sec (Unix s) when a refusal late in it came: the sum of every process's
// LateSecond share of that second. A window's count is the fleet's, and
// each process's share of it moves from one episode to the next as their
// rates do (issue 18, real processes against a clock window of 100
// answering in 5 ms: 46 and 54 in one episode, 53 and 47 in the next, so
// neither process read the window from its own counts, and a third
// episode came). When the fleet's counts of the key's last two such
// seconds show a window (lateRec.shows), the level is the key's share of
// the later one, as for a read from its own counts; the returned Decision
// says whether that lowered the rate. A count of a second the key keeps no
// record of, or under the key's own share, is ignored.
func (c *Controller) FleetCount(s *State, now, sec int64, count int) Decision {
	c.start0(s)
	d := Decision{Rate: s.rate, PausedUntil: s.pausedUntil}
	if sec <= 0 || c.plateau == 0 {
		return d
	}
	if s.winCap != 0 {
		if sec == s.winSec && s.winFleet == 0 && s.wholeFleet(count) {
			s.winFleet = count
		}
		return d
	}
	switch sec {
	case s.late.sec:
		if count >= s.late.n {
			s.late.fleet = count
		}
	case s.prevLate.sec:
		if count >= s.prevLate.n {
			s.prevLate.fleet = count
		}
	default:
		return d
	}
	if s.late.fleet == 0 || !s.late.shows(s.prevLate, s.late.fleet, s.prevLate.fleet) {
		return d
	}
	if d.Change = c.windowRead(s, s.late.sec, s.late.n, s.late.fleet); d.Change == Decreased {
		d.Reason = ReasonThrottled
	}
	d.Rate = s.rate
	return d
}

// A clock window's count is the same every second until the provider
// changes it, so a key that holds a rate under it is served that rate's
// count every second. Once a window's count was read (State.winRead), a
// refusal at a rate the key held, late in a second (windowLate) after
// fewer than windowStep of the calls the second before served, says the
// limit fell under the rate held. By how much the count does not say: a
// limit that changes late in a second refuses at once, after as many
// calls as the old limit had served by then. Read as the window's count,
// it left the fleet over the new limit, and a second episode of refusals
// came in the next second (issue 18, real processes against a clock
// window answering in 20 ms whose limit halved 0.70-0.74 s into a
// second: one process read its 33-36 calls, the other cut to the
// plateau, the fleet levelled at 76-83 against 50, and a provider that
// bans after five refusals in 10 s, three of them the first episode's,
// banned it). So the rate halves, as a
// refusal soon after a held refusal's pause confirms (confirmedCut), or
// goes to the count if that is lower. A refusal after windowStep or more
// of the second before's count (the last calls of a second, which a
// fleet's uneven sends may take past an unchanged count) is read as
// before.
const windowStep = 0.9

// windowStep returns, for a refused call sent at sent (Unix µs), how many
// calls sent in its clock second before it were served, when that is a
// window's count spent under the rate the key held (see the constant):
// a window's count was read before, the call was sent late in the
// second, and fewer than windowStep of the second before's were served.
// It returns 0 otherwise.
func (s *State) windowStep(sent int64) int {
	if !s.winRead || s.prevOK == 0 {
		return 0
	}
	if n := s.windowServed(sent); n > 0 && float64(n) < windowStep*float64(s.prevOK) {
		return n
	}
	return 0
}

// wholeFleet reports whether count, the fleet's count of calls served in
// the second a window's count was read in (winSec), holds every process's
// share, not only those told so far: more than the key's own (winN), and,
// with a share of the fleet's calls known (FleetShare), about the key's
// count over its share. A count short of the fleet's would read a true
// window as refuted.
func (s *State) wholeFleet(count int) bool {
	if count < s.winN || count <= 0 {
		return false
	}
	if s.share > 0 {
		return float64(count) >= fleetWhole*float64(s.winN)/s.share
	}
	return count > s.winN
}

// fleetWhole is how much of the key's count over its share the fleet's
// count of a second must be to hold every process's share (wholeFleet).
const fleetWhole = 0.9

// winRefuted is how far over a window's count (State.winFleet) the
// fleet's calls answered in a later second must be to refute it
// (FleetCalls): a window counts calls as they arrive, the fleet's count as
// they are answered, so a few calls in flight at the second's turn may
// fall either side.
const winRefuted = 1.1

// FleetCalls tells the controller the fleet's calls answered in clock
// second k (Unix s), own of them this process's, as FleetShare does (the
// share is own over fleet). It also tests the key's window read against
// it: a window aligned to the clock serves at most its count a second,
// so a later second with no pause or decrease of the key in it, in which
// the fleet was answered more than winRefuted times the count read
// (State.winFleet), refutes the read, and the key recovers as from any
// cut. Issue 18: a token bucket answering with a jitter of 20 ms, read as
// a window from two refusals that came after the same count at rates apart
// (windowSame), held one process at 0.97 of its count while the other went
// on at its own level, the fleet at 0.76-0.78 of the limit with no
// refusal, for the 30 s a whole-second pause prices.
func (c *Controller) FleetCalls(s *State, now, k int64, own, fleet int) {
	c.start0(s)
	if own <= 0 || fleet < own {
		return
	}
	c.FleetShare(s, now, float64(own)/float64(fleet))
	if s.winCap == 0 || s.winFleet == 0 || k <= s.winSec {
		return
	}
	from := k * int64(sec)
	if s.pausedUntil > from || s.lastDecrease > from {
		return // a pause or a cut reached into it: no measure of a window
	}
	if float64(fleet) > winRefuted*float64(s.winFleet) {
		s.winCap, s.winSec, s.winFleet, s.winKnown, s.winRead = 0, 0, 0, false, false
	}
}

// heardLag returns how long (µs) after a clock second turned a pause
// heard of from the store may still be a refusal of that second's: about
// two of the key's calls at rate r (it hears of one when it next tries to
// send), 20 to 100 ms.
func heardLag(r float64) int64 {
	if r <= 0 {
		return 100_000
	}
	return min(max(int64(2*sec/r), 20_000), 100_000)
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// served counts a success of a call sent at sent (Unix µs) in its clock
// second.
func (s *State) served(sent int64) {
	if s.refusedAt != 0 && sent >= s.refusedAt {
		s.cycOK++
	}
	switch k := sent / int64(sec); {
	case k == s.clockSec:
		s.clockOK++
	case k > s.clockSec:
		s.prevOK = 0
		if k == s.clockSec+1 {
			s.prevOK = s.clockOK
		}
		s.clockSec, s.clockOK = k, 1
	}
}

// windowServed returns, for a refused call sent at sent (Unix µs) late in
// its clock second (windowLate), how many calls sent in that second before
// it were served; 0 when it was sent earlier in the second (or a call
// sent in a later second was served already).
func (s *State) windowServed(sent int64) int {
	if sent <= 0 || float64(sent%int64(sec)) < windowLate*sec || sent/int64(sec) != s.clockSec {
		return 0
	}
	return s.clockOK
}

// count records one completed call at now for the usage estimate.
func (s *State) count(now int64) {
	if s.useStart == 0 || now < s.useStart {
		s.useStart, s.useCount = now, 0
	}
	if el := now - s.useStart; el >= int64(sec) {
		s.useRate = float64(s.useCount) / (float64(el) / sec)
		s.useKnown = true
		s.useStart, s.useCount = now, 0
	}
	s.useCount++
}
