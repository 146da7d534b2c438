package outbound

import (
	"math"

	"github.com/sluicerl/sluice/signal"
)

// weightMargin is the share of a learned window budget a key is paced at
// in an ordinary window: the last calls of a window are booked and in
// flight before their usage is reported, so a pace aimed at exactly the
// budget would now and then put one call too many in it.
const weightMargin = 0.98

// usedWeight learns a window budget the provider never states from the
// usage it reports (Binance's X-MBX-USED-WEIGHT-(interval): the weight used
// in the current window, which resets when the clock enters the next
// interval). A refusal while the header says W means the budget is W: the
// refused call did not fit on top of it. A success reporting more than
// that raises it (the limit went up). The weight of one call is the
// smallest step between two reports (every report is a multiple of it),
// and the window's length is the header's interval. The zero value knows
// nothing; the key's adaptive mutex guards it.
//
// Once the budget is known the key is paced window by window, the windows
// aligned to the clock as the provider's are (pace): what the current
// window has left over the time to its reset, so that a window whose start
// a pause took still gets its budget, and a window whose calls are spent
// waits for its reset. Every probeGap windows, when the window before was
// spent to the budget with no refusal, one window probes: it spends its
// budget early, then goes on one call at a time, so that a raised limit
// shows as a success above the budget (and the next window probes too),
// and an unchanged one costs one refusal, with no call in flight behind
// it, early enough in the window that the next one's budget can still be
// spent after its Retry-After.
type usedWeight struct {
	window int64 // µs, the interval of the policy followed
	last   int64 // the last usage reported
	unit   int64 // the weight of one call, 0 until known
	budget int64 // the window's budget, 0 until a refusal showed it
	// assumed: budget is the one a minute's window is assumed to have
	// (assumedMinuteBudget), which no refusal or success has shown yet.
	assumed bool
	// stepped: a step between two reports was seen (unit no longer
	// rests on the first report's usage alone).
	stepped bool
	peak    int64 // the most usage reported for this interval
	// served is the most usage reported for a window before cur: how far
	// a window is known to go with no refusal while the budget is unknown
	// (see explore).
	served int64
	// cur is the latest window (its index since the epoch) a report was
	// sent in and curUsed the most usage reported for it; prev and
	// prevUsed the one before it, and prevTail the weight the fleet sent
	// in prev after the latest report of it (see tail).
	cur, curUsed   int64
	prev, prevUsed int64
	prevTail       float64
	// refusedIn is the window of the latest refusal that showed the
	// budget, raisedIn that of the latest success that raised it.
	refusedIn, raisedIn int64
	// shown: the latest report was a refusal that showed the budget.
	shown bool
	// lastSent is when the latest report of window cur was sent, and
	// lastUsed its usage; flow is the fleet's calls per second in the
	// window as the reports show it; wait is how long (µs) a turn waits
	// once booked, on average. Together they estimate the calls booked
	// or in flight that no report shows yet (unseen).
	lastSent, lastUsed int64
	flow, wait         float64
}

// booked notes that a turn was booked d µs ahead.
func (w *usedWeight) booked(d int64) {
	w.wait += 0.2 * (float64(max(d, 0)) - w.wait)
}

// unseen estimates how many calls of window k were booked or sent by now
// that no report shows yet: the fleet's flow since the latest report's
// call left (over at most two latencies: a call of this process's that
// left before would have been answered, and counting back further would
// count the time of a pause, when nothing left, as flow), and with booked
// the turns booked ahead, up to the reset.
func (w *usedWeight) unseen(k, now, lat int64, booked bool) float64 {
	from := max(k*w.window, w.lastSent, now-2*lat)
	d := float64(max(now-from, 0))
	if booked && k == w.cur {
		// (With no report of this window yet, it began or a pause
		// ended moments ago: the turns booked were the last one's.)
		d += min(w.wait, float64((k+1)*w.window-now))
	}
	return w.flow * d / 1e6
}

// spent reports whether an ordinary window's calls are spent at now, by
// the calls that left: a turn booked before then is not taken when due. A
// probing window's are spent too once a refusal no longer fits in it
// (refusalFits).
func (w *usedWeight) spent(now, lat int64) bool {
	if w.ceiling() <= 0 {
		return false
	}
	lat = max(lat, minWeightLatency)
	k := now / w.window
	if w.probing(k, lat) && w.refusalFits(now, lat) {
		return false
	}
	return weightMargin*w.perWindow()-w.used(k, now, lat, false) < 1
}

// used is how many calls window k has used by now: what the reports of it
// show and what they do not show yet (unseen).
func (w *usedWeight) used(k, now, lat int64, booked bool) float64 {
	used := w.unseen(k, now, lat, booked)
	if k == w.cur {
		used += float64(w.curUsed) / float64(w.cost())
	}
	return used
}

// The intervals a weight window may have (Binance's run from a second to a
// day): a header outside them is garbage, not a window to pace by (a
// window of years would stall the key, one of a microsecond unleash it).
const (
	minWeightWindow = int64(1e6)      // µs: one second
	maxWeightWindow = int64(86_400e6) // µs: one day
	maxWeightUsed   = int64(1) << 40  // a usage beyond this is garbage
	refusalShare    = 4               // see observe
)

// assumedMinuteBudget is the budget a window of a minute (Binance's
// X-MBX-USED-WEIGHT-1M) is assumed to have from its first report until a
// refusal or a success above it shows the real one: the Spot API's
// REQUEST_WEIGHT limit, 6000 weight a minute per IP
// (https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits;
// exchangeInfo's rateLimits are authoritative), and the request-weight
// capacity of provider/profiles/binance.yaml (a test holds them together).
// It is an assumption: a refusal under it sets the budget (USD-M futures,
// for one, allow 2400), as it would with no assumption. With no budget at
// all, a minute's window was paced by the slow start alone, which grew for
// many seconds with no refusal to stop it and spent the minute's budget at
// about 6 times its pace (issue 18), refused with calls in flight behind
// the first refusal and a ban for them. Other windows assume nothing: a
// second's budget is learned from its first refusal within a second or
// two (see explore).
const (
	assumedMinuteBudget = int64(6000)
	assumedWindow       = int64(60e6) // µs: the window it is assumed for
)

// Pacing by the window (see pace).
const (
	// probeEvery is how often (µs), at most, a window probes above the
	// budget.
	probeEvery = int64(5e6)
	// probeShare is the most of the budget that failed probes may cost
	// (see probeGap).
	probeShare = 0.005
	// weightBurst is the fastest pace, as a multiple of the budget over
	// the window: a window whose start a pause took catches up at up to
	// this, and a probing window spends its budget at it.
	weightBurst = 3
	// maxInFlight bounds the fast pace too: calls in flight at once.
	maxInFlight = 3
	// probeSpacing is how many attempt latencies apart a probing window
	// sends its calls beyond the budget: one at a time, so that a refusal
	// is heard before the next call leaves and no call in flight is
	// refused after it (a provider counts those towards a ban).
	probeSpacing = 1.5
	// probeApproach is how many calls under the budget a probing
	// window's calls begin to leave one at a time.
	probeApproach = 2
	// probeStop is the share of a window that must be left for a window
	// that found the limit raised to go on growing.
	probeStop = 0.2
	// flowSpan is the least time (µs) between the two reports a flow is
	// measured over.
	flowSpan = int64(5000)
	// minWeightLatency is the least latency (µs) pace assumes.
	minWeightLatency = int64(1000)
)

// observe reads rep, whose request was sent at sent (Unix µs), and returns
// the rate, in calls per second, that bounds the key (the fastest pace
// returns; see pace for the pace itself), or 0 while the budget or a
// call's weight is unknown.
func (w *usedWeight) observe(rep *signal.Report, sent int64) float64 {
	w.shown = false
	var pol *signal.Policy
	for i := range rep.Policies[:min(rep.NPolicies, len(rep.Policies))] {
		p := &rep.Policies[i]
		const need = signal.FieldUsed | signal.FieldWindow
		if p.Source == signal.SourceBinance && p.Name == "weight" && p.Known&need == need &&
			p.Window >= minWeightWindow && p.Window <= maxWeightWindow &&
			(pol == nil || p.Window < pol.Window) {
			pol = p
		}
	}
	if pol == nil {
		return w.ceiling()
	}
	if pol.Window != w.window {
		*w = usedWeight{window: pol.Window}
		if w.window == assumedWindow {
			w.budget, w.assumed = assumedMinuteBudget, true
		}
	}
	used := pol.Used
	if used <= 0 || used > maxWeightUsed || rep.Banned {
		return w.ceiling() // a ban's report says nothing about the window
	}
	// Every usage is a multiple of a call's weight, and so is every
	// difference between two of them.
	step := used
	if d := used - w.last; w.last > 0 && d > 0 {
		step, w.stepped = d, true
	}
	if w.unit == 0 || step < w.unit {
		w.unit = step
	}
	w.last = used
	w.peak = max(w.peak, used)
	// The window the provider counted the call in: the one it was sent
	// in (the provider counts it when it arrives, a little later; a
	// report taken for the earlier window only understates that one).
	k := sent / w.window
	switch {
	case k > w.cur:
		w.served = max(w.served, w.curUsed)
		if k == w.cur+1 {
			w.prev, w.prevUsed, w.prevTail = w.cur, w.curUsed, w.tail(w.cur)
		} else {
			w.prev, w.prevUsed, w.prevTail = k-1, 0, 0
		}
		w.cur, w.curUsed = k, used
		w.lastSent, w.lastUsed = sent, used
	case k == w.cur:
		w.curUsed = max(w.curUsed, used)
		if dt := sent - w.lastSent; dt >= flowSpan && used >= w.lastUsed {
			// Usage is the fleet's: its rise over the time between
			// two calls of this process is the fleet's flow.
			f := float64(used-w.lastUsed) / float64(w.cost()) / (float64(dt) / 1e6)
			w.flow += 0.5 * (f - w.flow)
			w.lastSent, w.lastUsed = sent, used
		}
	case k == w.prev:
		w.prevUsed = max(w.prevUsed, used)
	}
	switch {
	case rep.Throttled && refusalShare*used >= w.peak:
		// A refusal while the window holds far less than it has held
		// before was about something else (another of the provider's
		// limits): it says nothing of this window's budget. (The AIMD
		// controller still slows down for it.)
		w.budget, w.refusedIn, w.shown, w.assumed = used, k, true, false
	case rep.Class == signal.ClassSuccess && w.budget > 0 && used > w.budget:
		w.budget, w.raisedIn, w.assumed = used, k, false
	}
	return w.ceiling()
}

// ceiling is the fastest pace: weightBurst times the budget over the
// window, in calls per second, 0 while unknown.
func (w *usedWeight) ceiling() float64 {
	if w.budget <= 0 || w.unit <= 0 || w.window <= 0 {
		return 0
	}
	return weightBurst * w.perWindow() / (float64(w.window) / 1e6)
}

// cost is the weight of one call as the pace counts it: unit, but 1 while
// an assumed budget's only report is the first one. The first report's
// usage is a call's weight only if the window held nothing before it (a
// window a restarted fleet or another client already used would read as a
// call of thousands, a budget of a call or two, and stop the key until the
// reset with no report to correct it); 1 errs the other way, counting the
// budget in weight rather than calls, which the usage still stops at, for
// the one latency until the next report shows a step. (A learned budget's
// first report is the refusal that showed it, or follows others: unit.)
func (w *usedWeight) cost() int64 {
	if w.assumed && !w.stepped {
		return 1
	}
	return w.unit
}

// base is the ordinary pace, in calls per second: weightMargin of the
// budget over the window, 0 while unknown.
func (w *usedWeight) base() float64 {
	if w.ceiling() <= 0 {
		return 0
	}
	return weightMargin * w.perWindow() / (float64(w.window) / 1e6)
}

// perWindow is the budget in calls.
func (w *usedWeight) perWindow() float64 { return float64(w.budget) / float64(w.cost()) }

// fast is the fastest a window is paced, in calls per second, when calls
// take lat µs: weightBurst times the budget over the window, but no more
// than maxInFlight calls a latency (a limit that fell while the key goes
// that fast refuses about that many calls in flight, and a provider counts
// those towards a ban), and never under the ordinary pace. An assumed
// budget is never spent faster than the ordinary pace: if it is wrong,
// the calls in flight when the first refusal says so are that pace's.
func (w *usedWeight) fast(lat int64) float64 {
	base := weightMargin * w.perWindow() / (float64(w.window) / 1e6)
	if w.assumed {
		return base
	}
	return max(min(w.ceiling(), maxInFlight*1e6/float64(max(lat, minWeightLatency))), base)
}

// probeGap is how many windows apart probing windows are, when calls take
// lat µs: every probeEvery, or further apart when a failed probe would
// cost more than probeShare of that time's budget. A failed probe is
// refused once the window's budget is spent at the fast pace; its
// Retry-After (to the reset, in whole seconds) may run into the next
// window, whose budget the key then spends at the fast pace in what is
// left of it, as far as it gets. (With one-second windows and a fast pace
// capped by the calls in flight, that can be most of a window: such a key
// probes rarely.)
func (w *usedWeight) probeGap(lat int64) int64 {
	n := max(1, (probeEvery+w.window-1)/w.window)
	per := w.perWindow()
	win := float64(w.window) / 1e6
	fast := w.fast(lat)
	// The refusal comes when the budget is spent, a latency later.
	ttr := max(0, win-per/fast-float64(lat)/1e6)
	spill := math.Ceil(ttr) - ttr // of the next window, in seconds
	cost := max(0, weightMargin*per-fast*max(0, win-spill)) / per
	return max(n, int64(math.Ceil(cost/probeShare/float64(n)))*n)
}

// refusalFits reports whether a call sent at now beyond the budget, when
// calls take lat µs, may be refused: its Retry-After (to the reset, in
// whole seconds) leaves enough of the next window for its budget at the
// fast pace (see probeGap), short of refusalLoss of it at most. A probing
// window's calls beyond the budget leave one at a time, and when the
// fleet's calls before them went out late (a process that did not probe
// held the fleet's shared turns at the ordinary pace), the refusal came
// 0.8 s and more into a window of a second, and its pause took most of the
// next one (issue 18). A minute's window loses under a second of its 60
// to the rounding, even at the ordinary pace of an assumed budget: it may
// always be probed.
func (w *usedWeight) refusalFits(now, lat int64) bool {
	reset := (now/w.window + 1) * w.window
	ttr := float64(reset-now-lat) / 1e6
	if ttr <= 0 {
		return false
	}
	spill := math.Ceil(ttr) - ttr
	win := float64(w.window) / 1e6
	per := w.perWindow()
	return weightMargin*per-w.fast(lat)*(win-spill) <= refusalLoss*per
}

// refusalLoss is the share of the next window's budget a probe's refusal
// may leave unspent (refusalFits).
const refusalLoss = 0.02

// probing reports whether window k probes above the budget, when calls
// take lat µs: the previous one raised it, or it is one of every
// probeGap's windows and the one before was spent to the budget (the pace,
// not the demand, held the key back) with no refusal.
func (w *usedWeight) probing(k, lat int64) bool {
	if w.budget <= 0 || w.refusedIn == k || w.refusedIn == k-1 {
		return false
	}
	if w.raisedIn == k || w.raisedIn == k-1 {
		return true
	}
	before := float64(w.prevUsed) + w.prevTail // the usage of window k-1
	switch {
	case w.cur == k-1:
		before = float64(w.curUsed) + w.tail(w.cur) // no report of window k yet
	case w.prev != k-1:
		return false
	}
	return k%w.probeGap(lat) == 0 && before >= 0.9*weightMargin*float64(w.budget)
}

// tail is the weight the fleet sent in window k, the current one, after
// the latest report of it: the flow over the time from that report's call
// to the window's end. A process's latest report of a window shows what
// the fleet used when its own last call left, and the other processes'
// calls after it are missing: issue 18, two processes at 50 calls a
// second, one saw 88 of a budget of 100 when the window ended spent, did
// not probe the next window with the other, and its ordinary pace held
// the fleet's shared turns at the budget's, so that the probing window
// was refused only 0.81-0.88 s in, and its whole-second Retry-After took
// most of the window after it (15-31 calls of 49).
func (w *usedWeight) tail(k int64) float64 {
	if k != w.cur || w.lastSent == 0 {
		return 0
	}
	return w.flow * float64(w.cost()) * float64(max((k+1)*w.window-w.lastSent, 0)) / 1e6
}

// pace returns the rate, in calls per second, for a call at now (Unix µs)
// when calls take lat µs, or 0 while the budget is unknown; and once the
// window's calls are spent, its reset (Unix µs: the key waits for it;
// else 0). An ordinary window is paced so that its usage reaches
// weightMargin of the budget by its reset: that share of the budget over
// the window, faster (up to the fast pace) when it is behind, as after a
// pause. A probing window spends the budget but probeApproach calls at the
// fast pace, then sends one call at a time, probeSpacing latencies apart;
// once one succeeded above the budget, two at a time, until probeStop of
// the window is left.
func (w *usedWeight) pace(now, lat int64) (float64, int64) {
	if w.ceiling() <= 0 {
		return w.explore(now, lat), 0
	}
	lat = max(lat, minWeightLatency)
	hi := w.fast(lat)
	k := now / w.window
	reset := (k + 1) * w.window
	used := w.used(k, now, lat, true)
	per := w.perWindow()
	gentle := min(hi, 1e6/(probeSpacing*float64(lat)))
	if w.probing(k, lat) {
		switch {
		case used < per-probeApproach:
			return hi, 0
		case w.raisedIn == k:
			// The limit rose: grow a little faster, to a little
			// before the reset (a refusal there costs most of the
			// next window, once).
			if float64(reset-now) < probeStop*float64(w.window) {
				return hi, reset
			}
			return min(hi, 2*gentle), 0
		}
		if !w.refusalFits(now, lat) {
			// Too late in the window: a refusal now would take
			// more of the next one than its budget can spare.
			// Wait for the reset instead, with the budget spent.
			return hi, reset
		}
		return gentle, 0
	}
	left := weightMargin*per - used
	if left < 1 {
		return hi, reset
	}
	if used+1 < weightMargin*per*float64(now-k*w.window)/float64(w.window) {
		// Behind the window's even pace (a pause took its start):
		// catch up at once, while there is time to.
		return hi, 0
	}
	base := weightMargin * per / (float64(w.window) / 1e6)
	return min(hi, max(base, left/(float64(reset-now)/1e6))), 0
}

// explore returns the pace, in calls per second, for a call at now (Unix
// µs) when calls take lat µs while the budget is unknown, or 0 for no
// bound of the window's own: a window's calls beyond probeApproach under
// the most usage any window before it reported leave one at a time,
// probeSpacing latencies apart, as a probing window's do. The first
// refusal, which shows the budget, then has no call in flight behind it
// (issue 18: a slow start growing x7 a second reached about twice the
// budget of a window of a second, and the calls in flight when it was
// spent, refused before the first refusal's Retry-After had passed,
// earned a ban).
func (w *usedWeight) explore(now, lat int64) float64 {
	if w.budget > 0 || w.unit <= 0 || w.window <= 0 || w.served <= 0 {
		return 0
	}
	lat = max(lat, minWeightLatency)
	k := now / w.window
	if w.used(k, now, lat, true) < float64(w.served)/float64(w.cost())-probeApproach {
		return 0
	}
	return 1e6 / (probeSpacing * float64(lat))
}
