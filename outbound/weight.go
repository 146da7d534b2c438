package outbound

import "github.com/sluicerl/sluice/signal"

// weightMargin is the share of a learned window budget a key is paced at:
// the provider's window edges fall where the fleet cannot see them, so a
// pace of exactly the budget would now and then put one call too many in
// a window.
const weightMargin = 0.97

// usedWeight learns a window budget the provider never states from the
// usage it reports (Binance's X-MBX-USED-WEIGHT-(interval): the weight used
// in the current window). A refusal while the header says W means the
// budget is W: the refused call did not fit on top of it. A success
// reporting more than that raises it (the limit went up). The weight of one
// call is the smallest step between two reports (every report is a
// multiple of it), and the window's length is the header's interval. The
// zero value knows nothing; the key's adaptive mutex guards it.
type usedWeight struct {
	window int64 // µs, the interval of the policy followed
	last   int64 // the last usage reported
	unit   int64 // the weight of one call, 0 until known
	budget int64 // the window's budget, 0 until a refusal showed it
	peak   int64 // the most usage reported for this interval
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

// observe reads rep's shortest weight policy and returns the rate, in calls
// per second, that keeps the fleet within the learned budget, or 0 while
// the budget or a call's weight is unknown.
func (w *usedWeight) observe(rep *signal.Report) float64 {
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
		return w.rate()
	}
	if pol.Window != w.window {
		*w = usedWeight{window: pol.Window}
	}
	used := pol.Used
	if used <= 0 || used > maxWeightUsed || rep.Banned {
		return w.rate() // a ban's report says nothing about the window
	}
	// Every usage is a multiple of a call's weight, and so is every
	// difference between two of them.
	step := used
	if d := used - w.last; w.last > 0 && d > 0 {
		step = d
	}
	if w.unit == 0 || step < w.unit {
		w.unit = step
	}
	w.last = used
	w.peak = max(w.peak, used)
	switch {
	case rep.Throttled && refusalShare*used >= w.peak:
		// A refusal while the window holds far less than it has held
		// before was about something else (another of the provider's
		// limits): it says nothing of this window's budget. (The AIMD
		// controller still slows down for it.)
		w.budget = used
	case rep.Class == signal.ClassSuccess && w.budget > 0 && used > w.budget:
		w.budget = used
	}
	return w.rate()
}

func (w *usedWeight) rate() float64 {
	if w.budget <= 0 || w.unit <= 0 || w.window <= 0 {
		return 0
	}
	return weightMargin * float64(w.budget) / float64(w.unit) / (float64(w.window) / 1e6)
}
