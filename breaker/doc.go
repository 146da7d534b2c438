// Package breaker is a circuit breaker as a pure state machine: closed,
// open and half-open, with a sliding error window in buckets, a
// minimum-throughput guard, a consecutive-failure trip, an open timeout and
// a half-open probe budget.
//
// Closed admits every call and counts outcomes in a window of
// Config.Window split into Config.Buckets buckets. It opens when
// Config.ConsecutiveFailures failures follow each other, or when the
// window holds at least Config.MinRequests outcomes and at least
// Config.FailureRate of them failed: without the minimum-throughput guard a
// cold start's first failure would read as a 100% failure rate. A run of
// consecutive failures counts calls sent after the failure before them
// was seen: calls in flight together fail together (a provider whose
// limit fell refuses every one of them at once), so a failure of a call
// admitted before the run's last failure was recorded counts in the
// window's failure rate but does not lengthen the run (Ticket.Seq). Open
// refuses every call with ErrOpen until Config.OpenTimeout has passed; the
// next call then moves it to half-open, which admits at most
// Config.HalfOpenProbes probes: the first failed probe opens it again,
// HalfOpenProbes successful ones close it. A probe that has not reported
// for an open timeout is taken as lost and its slot reused; if it reports
// after all, that frees no second slot.
//
// Only provider trouble counts as a failure: 429, 5xx and network errors
// (Classify). Other 4xx are healthy answers and count as successes; a
// canceled call is ignored. A caller with a rate controller may record a
// refusal for load as a Throttle instead: it counts in the failure rate
// and fails a probe, but takes no part in a run of consecutive failures
// while some call succeeded within the window; with no success for a
// window, or ever, it is a failure like any other (a provider refusing
// everything is down).
//
// Every transition is an Event (previous state, state, reason, counters,
// time) carrying no request data, payloads or credentials, which a caller
// may persist as evidence: the pure functions return it, and Locked passes
// it to a callback.
//
// The pure core (Policy, Breaker) takes now as Unix microseconds, does not
// allocate and reads no clock. Locked is the thin mutex wrapper, in the
// two-step form: Allow returns a Ticket, Done reports the outcome.
package breaker
