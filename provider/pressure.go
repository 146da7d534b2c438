package provider

import (
	"time"

	"github.com/sluicerl/sluice/store"
)

// Pressure returns the source-pressure reason (store.Pressure*) and wait
// of a ticket that was not OK, for a job handler to park its job without
// burning an attempt: return job.Pressure(t.Pressure()) with a nil error.
// An OK ticket returns "" and 0.
func (t *Ticket) Pressure() (reason string, wait time.Duration) {
	switch {
	case t.OK:
		return "", 0
	case t.Reason == "banned":
		return store.PressureBanned, t.Delay
	case t.Reason == "paused":
		return store.PressureRateLimited, t.Delay
	}
	return store.PressureNoCapacity, t.Delay
}

// Pressure returns the source-pressure reason and wait of a throttled or
// banned outcome (job.Pressure(reason, wait, err) parks the job until the
// provider allows it), and "" for every other kind: those are successes,
// or failures the job's own error handling decides on.
func (o Outcome) Pressure() (reason string, wait time.Duration) {
	switch o.Kind {
	case Banned:
		return store.PressureBanned, o.Delay
	case Throttled:
		if o.Report.Status == 429 || o.Report.HasRetryAfter && o.Report.Status != 200 {
			return store.PressureRateLimited, o.Delay
		}
		return store.PressureThrottled, o.Delay
	}
	return "", 0
}
