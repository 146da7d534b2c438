package outbound

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/aimd"
	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/signal"
)

func weightReport(status, used int, window string) *signal.Report {
	h := http.Header{}
	h.Set("X-Mbx-Used-Weight-"+window, strconv.Itoa(used))
	if status == http.StatusTooManyRequests || status == http.StatusTeapot {
		h.Set("Retry-After", "1")
	}
	rep := signal.Parse(0, signal.Response{Status: status, Header: h})
	return &rep
}

// sec is a second in µs; t0 is the start of a window of a second (and of
// a minute), aligned to the clock as the provider's are.
const sec = int64(time.Second / time.Microsecond)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()

// fast is the fastest pace at a weight budget of b calls a second.
func fastAt(b float64) float64 { return weightBurst * b }

func TestUsedWeightLearnsTheBudget(t *testing.T) {
	t.Parallel()
	var w usedWeight
	// Calls of weight 2, two processes interleaved: this one sees every
	// other report and some in a row.
	for i, used := range []int{2, 6, 10, 12, 16, 20, 24} {
		require.Zero(t, w.observe(weightReport(200, used, "1s"), t0+int64(i)*1000), "no budget before a refusal")
	}
	require.Equal(t, int64(2), w.unit, "a call's weight is the smallest step")
	// Refused at 100 used: the budget is 100 a second, 50 calls.
	require.InDelta(t, fastAt(50), w.observe(weightReport(429, 100, "1s"), t0+500_000), 1e-9)
	require.InDelta(t, 50, w.perWindow(), 1e-9)
	// A ban's report (usage 0) changes nothing; a success above the
	// budget raises it (the limit went up).
	require.InDelta(t, fastAt(50), w.observe(weightReport(418, 0, "1s"), t0+600_000), 1e-9)
	require.InDelta(t, fastAt(51), w.observe(weightReport(200, 102, "1s"), t0+700_000), 1e-9)
	// The limit halves: refused at 50.
	require.InDelta(t, fastAt(25), w.observe(weightReport(429, 50, "1s"), t0+sec+500_000), 1e-9)
	// The window's length comes from the header: a minute's 1200 weight
	// is 10 calls of 2 a second.
	var m usedWeight
	m.observe(weightReport(200, 4, "1m"), t0)
	m.observe(weightReport(200, 6, "1m"), t0+1000)
	require.InDelta(t, fastAt(10), m.observe(weightReport(429, 1200, "1m"), t0+2000), 1e-9)
	// Other reports keep what was learned.
	rep := signal.Parse(0, signal.Response{Status: 200})
	require.InDelta(t, fastAt(10), m.observe(&rep, t0+3000), 1e-9)
}

// TestUsedWeightIgnoresForeignRefusals: a 429 while the window holds a
// fraction of what it has held before was another limit's refusal, and
// must not set the budget to that fraction for good.
func TestUsedWeightIgnoresForeignRefusals(t *testing.T) {
	t.Parallel()
	var w usedWeight
	for i, used := range []int{2, 4, 6, 8, 100} {
		w.observe(weightReport(200, used, "1s"), t0+int64(i)*1000)
	}
	require.InDelta(t, fastAt(60), w.observe(weightReport(429, 120, "1s"), t0+10_000), 1e-9)
	// Early in a new window (2 used), a refusal from another limit.
	require.InDelta(t, fastAt(60), w.observe(weightReport(429, 2, "1s"), t0+sec+1000), 1e-9,
		"a refusal at 2 of a window that has held 120 is not this window's budget")
	require.False(t, w.shown, "nor does it explain the refusal")
	// A refusal near what the window holds is: the limit went down.
	require.InDelta(t, fastAt(40), w.observe(weightReport(429, 80, "1s"), t0+sec+2000), 1e-9)
	require.True(t, w.shown)
}

// TestUsedWeightIgnoresGarbageWindows: an interval outside a second to a
// day, or a usage beyond any real one, is not a window to pace by.
func TestUsedWeightIgnoresGarbageWindows(t *testing.T) {
	t.Parallel()
	for _, window := range []string{"99999d", "2d", "9999h"} {
		var w usedWeight
		w.observe(weightReport(200, 2, window), t0)
		w.observe(weightReport(200, 4, window), t0+1000)
		require.Zero(t, w.observe(weightReport(429, 100, window), t0+2000), window)
		require.Zero(t, w.window, window)
	}
	var w usedWeight
	w.observe(weightReport(200, 2, "1s"), t0)
	w.observe(weightReport(200, 4, "1s"), t0+1000)
	require.Zero(t, w.observe(weightReport(429, 1<<50, "1s"), t0+2000), "a usage of 2^50")
	require.InDelta(t, fastAt(50), w.observe(weightReport(429, 100, "1s"), t0+3000), 1e-9)
}

// learned returns a usedWeight that learned a budget of 100 weight a
// second (50 calls of 2) from a refusal in the window before t0.
func learned(t *testing.T) *usedWeight {
	t.Helper()
	w := &usedWeight{}
	w.observe(weightReport(200, 2, "1s"), t0-sec+1000)
	w.observe(weightReport(200, 4, "1s"), t0-sec+2000)
	w.observe(weightReport(429, 100, "1s"), t0-sec+900_000)
	require.InDelta(t, 50, w.perWindow(), 1e-9)
	return w
}

// nextProbe returns the first window after t0 that may probe (one of
// every probeGap's, when calls take lat µs) and its start (Unix µs).
func nextProbe(w *usedWeight, lat int64) (k, start int64) {
	gap := w.probeGap(lat)
	k = (t0/sec/gap + 1) * gap
	return k, k * sec
}

// Issue 18: a window is paced by what it has left until its reset, so that
// one whose start a Retry-After took still gets its budget, and one whose
// calls are spent waits for its reset rather than send one too many.
func TestUsedWeightPacesTheWindow(t *testing.T) {
	t.Parallel()
	const lat = 20_000
	w := learned(t)
	// The window after the refusal's: nothing used yet, the even pace.
	r, stop := w.pace(t0, lat)
	require.InDelta(t, weightMargin*50, r, 1e-9)
	require.Zero(t, stop)
	// Half way through it with nothing used (a pause took its start):
	// the fast pace, capped at maxInFlight calls a latency.
	r, stop = w.pace(t0+sec/2, lat)
	require.InDelta(t, min(fastAt(50), maxInFlight*1e6/lat), r, 1e-9)
	require.Zero(t, stop)
	// Reports show 48 calls used by 0.9 s: the calls are spent, the key
	// waits for the reset, and a turn booked before then is not taken.
	for i, used := range []int{90, 92, 94, 96} {
		w.observe(weightReport(200, used, "1s"), t0+800_000+int64(i)*25_000)
	}
	requireSpentToTheReset(t, w, t0+900_000, lat)
	require.False(t, w.spent(t0+sec, lat))
}

// requireSpentToTheReset checks that at now the key waits for the reset of
// its window (of a second, budget 50) with the calls spent, and that the
// next window is paced as any.
func requireSpentToTheReset(t *testing.T, w *usedWeight, now, lat int64) {
	t.Helper()
	reset := (now/sec + 1) * sec
	_, stop := w.pace(now, lat)
	require.Equal(t, reset, stop)
	require.True(t, w.spent(now, lat))
	r, stop := w.pace(reset, lat)
	require.InDelta(t, weightMargin*50, r, 1e-9)
	require.Zero(t, stop)
}

// Issue 18 item 4: a learned budget is probed every probeGap windows once
// the window before was spent to it with no refusal, so that a raised
// limit is found: the budget first, fast, then one call at a time beyond
// it; a success above the budget raises it, and the next window probes
// too.
func TestUsedWeightProbesARaisedLimit(t *testing.T) {
	t.Parallel()
	const lat = 10_000
	w := learned(t)
	require.Equal(t, probeEvery/sec, w.probeGap(lat), "at 50 calls a second and 10 ms, a failed probe costs nothing of the next window")
	// The first probing window after t0, and the one before it spent.
	k, start := nextProbe(w, lat)
	w.observe(weightReport(200, 94, "1s"), start-sec+900_000)
	w.observe(weightReport(200, 98, "1s"), start-sec+950_000)
	require.True(t, w.probing(k, lat))
	require.False(t, w.probing(k+1, lat))
	r, stop := w.pace(start+1000, lat)
	require.InDelta(t, fastAt(50), r, 1e-9, "the budget, fast")
	require.Zero(t, stop)
	// Two calls under the budget: one call at a time.
	w.observe(weightReport(200, 96, "1s"), start+300_000)
	r, _ = w.pace(start+310_000, lat)
	require.InDelta(t, 1e6/(probeSpacing*lat), r, 1e-9)
	// A success above the budget: raised at once; two calls at a time
	// for the rest of the window, and the next window probes too.
	w.observe(weightReport(200, 102, "1s"), start+400_000)
	require.InDelta(t, 51, w.perWindow(), 1e-9)
	r, _ = w.pace(start+410_000, lat)
	require.InDelta(t, 2e6/(probeSpacing*lat), r, 1e-9)
	_, stop = w.pace(start+sec-int64(probeStop*float64(sec))+1000, lat)
	require.Equal(t, start+sec, stop, "growth stops short of the reset")
	require.True(t, w.probing(k+1, lat))
	// Refused at 110 in the next window: that is the budget, and the
	// window after does not probe.
	w.observe(weightReport(429, 110, "1s"), start+sec+500_000)
	require.InDelta(t, 55, w.perWindow(), 1e-9)
	require.False(t, w.probing(k+2, lat))
}

// A probe needs demand: a window before that the key did not spend to the
// budget (the demand, not the pace, held it back) shows nothing a probe
// could test; nor does one just refused.
func TestUsedWeightProbesOnlyASpentBudget(t *testing.T) {
	t.Parallel()
	const lat = 10_000
	w := learned(t)
	k, start := nextProbe(w, lat)
	w.observe(weightReport(200, 40, "1s"), start-sec+900_000)
	require.False(t, w.probing(k, lat), "40 of 100 used")
	w.observe(weightReport(200, 98, "1s"), start-sec+950_000)
	require.True(t, w.probing(k, lat))
	w.observe(weightReport(429, 100, "1s"), start-sec+960_000)
	require.False(t, w.probing(k, lat), "refused in the window before")
}

// Where a failed probe costs much of the next window (the fast pace capped
// by the calls in flight, with one-second windows whose Retry-After takes
// a whole second), probes are further apart, so that they cost at most
// probeShare of the budget; with a minute's windows, a Retry-After's
// rounding costs nothing, and every window may probe.
func TestUsedWeightProbeGap(t *testing.T) {
	t.Parallel()
	w := learned(t)
	require.Equal(t, probeEvery/sec, w.probeGap(10_000))
	w.budget = 200 // 100 calls a second; at 20 ms, 150 at most
	require.Greater(t, w.probeGap(20_000), 10*probeEvery/sec)
	var m usedWeight
	m.observe(weightReport(200, 2, "1m"), t0)
	m.observe(weightReport(200, 4, "1m"), t0+1000)
	m.observe(weightReport(429, 12000, "1m"), t0+2000)
	require.Equal(t, int64(1), m.probeGap(20_000))
}

// Issue 18: a refusal that showed the learned budget is explained by it,
// as a probe's is: the key waits out the Retry-After but its rate is not
// cut (a cut cost seconds of slow recovery after each one). A foreign
// refusal still cuts.
func TestAdaptiveBudgetRefusalIsNoCut(t *testing.T) {
	t.Parallel()
	ctl, err := aimd.New(aimd.Config{Start: 40, SlowStart: -1, IgnoreLatency: true, Decrease: 0.5})
	require.NoError(t, err)
	a := newAdaptive(ctl)
	now := t0 - sec + 1000
	for _, used := range []int{2, 4, 6, 8} {
		a.observe(sample(weightReport(200, used, "1s"), time.Millisecond), weightReport(200, used, "1s"), now, 0)
		now += 1000
	}
	rep := weightReport(429, 100, "1s")
	o := a.observe(sample(rep, time.Millisecond), rep, now, 0)
	require.Positive(t, o.pause, "the Retry-After pauses the fleet")
	require.InDelta(t, fastAt(50), a.ctl.Rate(&a.state), 1e-9, "no cut")
	require.InDelta(t, weightMargin*50, a.rate(), 1e-9, "the window's ordinary pace")
	require.True(t, a.paused(now+1000))
	// A foreign refusal (2 used of a window that held 100) cuts.
	now += 3 * sec
	rep = weightReport(429, 2, "1s")
	a.observe(sample(rep, time.Millisecond), rep, now, 0)
	require.Less(t, a.ctl.Rate(&a.state), fastAt(50))
}

// Issue 18: while the budget is unknown (a slow start), a window's calls
// beyond the most any window before it used leave one at a time, so that
// the refusal that shows the budget has no call in flight behind it (a
// provider counts those towards a ban). Below that usage, and before any
// window is complete, the window sets no pace of its own.
func TestUsedWeightExploresGentlyBeyondTheMostServed(t *testing.T) {
	t.Parallel()
	const lat = 20_000
	gentle := 1e6 / (probeSpacing * lat)
	var w usedWeight
	// Window 0: 40 calls of weight 2, no refusal.
	for i := range 40 {
		w.observe(weightReport(200, 2*(i+1), "1s"), t0+int64(i)*20_000)
	}
	r, stop := w.pace(t0+900_000, lat)
	require.Zero(t, r, "no window is complete yet: nothing is known")
	require.Zero(t, stop)
	// Window 1: the first report moves window 0's 80 into what was served.
	w.observe(weightReport(200, 2, "1s"), t0+sec)
	require.Equal(t, int64(80), w.served)
	r, _ = w.pace(t0+sec+10_000, lat)
	require.Zero(t, r, "far under what window 0 used")
	for i := 1; i < 39; i++ {
		w.observe(weightReport(200, 2*(i+1), "1s"), t0+sec+int64(i)*10_000)
	}
	r, stop = w.pace(t0+sec+390_000, lat)
	require.InDelta(t, gentle, r, 1e-9, "at what window 0 used: one call at a time")
	require.Zero(t, stop)
	// The refusal shows the budget: the learned pace takes over.
	w.observe(weightReport(429, 84, "1s"), t0+sec+400_000)
	r, _ = w.pace(t0+2*sec, lat)
	require.InDelta(t, weightMargin*42, r, 1e-9)
}

// Issue 18 item 1: a minute's weight window (X-MBX-USED-WEIGHT-1M) is paced
// from its first report by the budget Binance documents, 6000 weight a
// minute, and no faster than that budget's ordinary pace while it is only
// assumed; before a step between two reports shows a call's weight, a call
// counts as 1 weight (the first report's usage may be the window's use by
// others, not one call). Other windows assume nothing.
func TestUsedWeightAssumesAMinuteBudget(t *testing.T) {
	t.Parallel()
	const lat = 20_000
	base := weightMargin * float64(assumedMinuteBudget) / 60
	var w usedWeight
	w.observe(weightReport(200, 1, "1m"), t0+1000)
	require.True(t, w.assumed)
	r, stop := w.pace(t0+2000, lat)
	require.InDelta(t, base, r, 1e-9, "paced by 6000 a minute from the first answer")
	require.Zero(t, stop)
	// Half way through the minute with little used: no catch-up above
	// the ordinary pace on an assumption.
	r, _ = w.pace(t0+30*sec, lat)
	require.InDelta(t, base, r, 1e-9)

	// A window others used already: the first report reads 3000; its
	// budget is not 2 calls of 3000 (a stop until the reset), but 6000
	// weight, of which 3000 are left.
	var busy usedWeight
	busy.observe(weightReport(200, 3000, "1m"), t0+40*sec)
	r, stop = busy.pace(t0+40*sec+1000, lat)
	require.InDelta(t, base, r, 1e-9)
	require.Zero(t, stop)
	require.False(t, busy.spent(t0+40*sec+1000, lat))
	// The next report shows calls of 2: 3000 calls a minute.
	busy.observe(weightReport(200, 3002, "1m"), t0+40*sec+10_000)
	r, _ = busy.pace(t0+40*sec+20_000, lat)
	require.InDelta(t, base/2, r, 1e-9)

	// Other windows keep today's behaviour: nothing until a refusal.
	var s usedWeight
	s.observe(weightReport(200, 1, "1s"), t0+1000)
	require.Zero(t, s.budget)
	r, _ = s.pace(t0+2000, lat)
	require.Zero(t, r)
}

// The assumption is corrected as a learned budget is: a refusal under it
// lowers it, a success above it raises it.
func TestUsedWeightAssumedBudgetIsCorrected(t *testing.T) {
	t.Parallel()
	var w usedWeight
	w.observe(weightReport(200, 2, "1m"), t0+1000)
	w.observe(weightReport(200, 4, "1m"), t0+2000)
	require.InDelta(t, fastAt(2400/2/60.0), w.observe(weightReport(429, 2400, "1m"), t0+3000), 1e-9)
	require.False(t, w.assumed)
	require.EqualValues(t, 2400, w.budget)

	var up usedWeight
	up.observe(weightReport(200, 5998, "1m"), t0+1000)
	up.observe(weightReport(200, 6000, "1m"), t0+2000)
	up.observe(weightReport(200, 6002, "1m"), t0+3000)
	require.False(t, up.assumed)
	require.EqualValues(t, 6002, up.budget)
}

// Issue 18: the limit falls mid-minute (6000 to 3000) when 3500 are used
// already: every call is refused until the window's end. The first refusal
// stops the key until the reset (a hard stop: the pace's stop and the
// spent check for turns booked before it), and the next window is paced by
// what it showed.
func TestUsedWeightLimitFallsMidMinute(t *testing.T) {
	t.Parallel()
	const lat = 20_000
	var w usedWeight
	now := t0
	for used := 1; used <= 3500; used++ {
		w.observe(weightReport(200, used, "1m"), now)
		now += 8500 // a little under 118 a second: 3500 by 29.75 s
	}
	r, stop := w.pace(now, lat)
	require.Positive(t, r)
	require.Zero(t, stop)
	require.False(t, w.spent(now, lat))
	w.observe(weightReport(429, 3500, "1m"), t0+30*sec)
	require.True(t, w.shown)
	_, stop = w.pace(t0+30*sec+1000, lat)
	require.Equal(t, t0+60*sec, stop, "stopped until the minute's reset")
	require.True(t, w.spent(t0+30*sec+1000, lat), "a turn booked before the refusal is not taken")
	require.True(t, w.spent(t0+59*sec, lat))
	r, stop = w.pace(t0+60*sec, lat)
	require.InDelta(t, weightMargin*3500/60, r, 1e-9)
	require.Zero(t, stop)
}

// An assumed budget is no news for the fleet; a refusal that confirms it
// (the same 6000) is, as a learned one is.
func TestAdaptiveAssumedBudgetIsNotShared(t *testing.T) {
	t.Parallel()
	ctl, err := aimd.New(aimd.Config{Start: 40, SlowStart: -1, IgnoreLatency: true})
	require.NoError(t, err)
	a := newAdaptive(ctl)
	now := t0 + 1000
	for _, used := range []int{5998, 5999} {
		rep := weightReport(200, used, "1m")
		o := a.observe(sample(rep, time.Millisecond), rep, now, 0)
		require.Zero(t, o.budget)
		now += 1000
	}
	rep := weightReport(429, 6000, "1m")
	o := a.observe(sample(rep, time.Millisecond), rep, now, 0)
	require.EqualValues(t, 6000, o.budget)
	require.Equal(t, assumedWindow, o.budgetWindow)
	require.True(t, a.paused(now+1000))
}

// The budget assumed for a minute's used weight (Binance's REQUEST_WEIGHT)
// is the embedded binance profile's request-weight capacity.
func TestAssumedMinuteBudgetIsBinanceProfile(t *testing.T) {
	t.Parallel()
	set, err := provider.Embedded()
	require.NoError(t, err)
	p, ok := set.Get("binance")
	require.True(t, ok)
	found := false
	for _, l := range p.Limits {
		if l.Sync != nil && l.Sync.Source == "binance" && l.Sync.Policy == "weight" && l.Sync.Window == time.Minute {
			require.Equal(t, assumedMinuteBudget, l.Capacity)
			require.Equal(t, assumedWindow, l.Window.Microseconds())
			found = true
		}
	}
	require.True(t, found, "the binance profile has no minute's weight limit")
}

// Issue 18: a process's latest report of a window shows the fleet's usage
// when its own last call left; the other processes' calls after it count
// too (tail), or one process saw 88 of a budget of 100 spent, did not
// probe with the other, and held the fleet's turns at the ordinary pace.
func TestUsedWeightProbesWithTheFleet(t *testing.T) {
	t.Parallel()
	const lat = 10_000
	w := learned(t)
	k, start := nextProbe(w, lat)
	// This process's reports of the window before: the fleet's usage
	// rising at 49 calls a second, the last at 88 sent 60 ms before
	// the window's end.
	for i, used := range []int{68, 72, 76, 80, 84, 88} {
		w.observe(weightReport(200, used, "1s"), start-sec+740_000+int64(i)*40_000)
	}
	require.InDelta(t, 50, w.flow, 3, "the fleet's flow, in calls a second")
	require.Less(t, float64(w.curUsed), 0.9*weightMargin*float64(w.budget), "the reports alone read the window as not spent")
	require.True(t, w.probing(k, lat), "the fleet's calls after the latest report spent it")
	// A fleet that sent a call every 0.2 s (its demand, not the pace,
	// held it back) did not spend the window: no probe.
	d := learned(t)
	for i, used := range []int{60, 62, 64} {
		d.observe(weightReport(200, used, "1s"), start-sec+500_000+int64(i)*200_000)
	}
	require.Less(t, d.flow, 15.0)
	require.False(t, d.probing(k, lat))
	// Once a report of window k came, the tail of k-1 is kept.
	w.observe(weightReport(200, 2, "1s"), start+1000)
	require.Equal(t, k-1, w.prev)
	require.True(t, w.probing(k, lat))
}

// Issue 18: a probing window sends beyond the budget only while a refusal
// (its Retry-After to the reset, in whole seconds) leaves the next window
// time to spend its budget at the fast pace; later, it waits for the
// reset, and a turn booked before is not taken.
func TestUsedWeightProbesNoLaterThanARefusalFits(t *testing.T) {
	t.Parallel()
	const lat = 20_000
	w := learned(t)
	k, start := nextProbe(w, lat)
	w.observe(weightReport(200, 94, "1s"), start-sec+900_000)
	w.observe(weightReport(200, 98, "1s"), start-sec+950_000)
	require.True(t, w.probing(k, lat))
	// The budget was spent by 0.4 s: one call at a time beyond it.
	w.observe(weightReport(200, 98, "1s"), start+400_000)
	r, stop := w.pace(start+400_000, lat)
	require.InDelta(t, 1e6/(probeSpacing*lat), r, 1e-9)
	require.Zero(t, stop)
	require.False(t, w.spent(start+400_000, lat))
	// At 0.8 s a refusal would pause the key until 1.8 s, and 0.2 s at
	// the fast pace holds 30 calls of the next window's 49.
	require.False(t, w.refusalFits(start+800_000, lat))
	// Nor does one whose answer would come after the reset.
	require.False(t, w.refusalFits(start+sec-lat/2, lat))
	requireSpentToTheReset(t, w, start+800_000, lat)
	// A minute's window loses under a second of its 60 to a
	// refusal's rounding: a probe fits at any time, on an assumed
	// budget (spent at the ordinary pace) as on a learned one.
	var m usedWeight
	m.observe(weightReport(200, 2, "1m"), t0+1000)
	m.observe(weightReport(200, 4, "1m"), t0+2000)
	require.True(t, m.assumed)
	for _, at := range []int64{sec, 30 * sec, 59*sec + 500_000} {
		require.True(t, m.refusalFits(t0+at, lat), at)
	}
	m.observe(weightReport(429, 2400, "1m"), t0+3000)
	require.False(t, m.assumed)
	require.True(t, m.refusalFits(t0+59*sec+500_000, lat))
}
