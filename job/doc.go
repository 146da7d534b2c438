// Package job runs ingestion jobs for providers whose limits are shared by
// a fleet of workers (seeds 000, 002 and 004).
//
// A connector (one per provider account: status, the limiter policies
// that pace it, a provider profile) owns jobs (type, opaque params,
// priority, a schedule (an interval, or a cron expression in a time zone),
// a fairness group). Records live in a
// store.JobStore: store/memstore for embedding and tests, SQLite or
// PostgreSQL when they must survive restarts or be shared.
//
// A Worker claims due jobs of active connectors in priority order, fairly
// between groups (rounds of at most one job per group, or the group's
// weight set by store.JobStore.SetGroupWeight; least recently served
// first), each under a lease with a fencing token that heartbeats keep
// alive. Before claiming, the store skips connectors under source pressure
// and asks Config.Gate about capacity: a connector without it has its due
// jobs moved to when capacity returns instead of claimed. CapacityGate is
// such a gate: it peeks at the connector's limiter policies without
// charging them. Worker.Run claims up to Config.ClaimAhead jobs beyond its
// free handler slots: they wait for a slot with their leases heartbeated,
// and are released unrun when Run stops. By default (auto) it claims as
// many ahead as its slots free during one claim, up to 3 x Concurrency:
// that many for jobs much shorter than a claim, none for jobs longer than a
// claim per slot, so a worker never holds a job it cannot start while
// another worker has a free slot.
//
// The handler gets a *Run:
//
//   - Run.Call paces every upstream attempt through the connector's
//     policies (all or nothing, before the call) and sends it through the
//     outbound client (breaker, adaptive rate, retries, retry budget,
//     fleet-wide Retry-After).
//   - Run.Commit moves the cursor after a slice was durably written, fenced
//     by the lease's token: a worker that lost its lease gets ErrLeaseLost
//     and writes nothing. Run.CommitCatchUp keeps the catch-up bookmark
//     apart from the steady-state one.
//   - The run's Envelope (request cap, wall-clock deadline, retry budget;
//     unbounded by default) is checked at each Commit, never mid-call.
//
// The handler's outcome decides what happens to the job:
//
//   - nil: success; due again after its interval plus jitter, or at its
//     next cron time plus jitter short of the cron time after it.
//   - *GapError (a budget ran out): a resumable gap record quotes the
//     committed cursor; due again soon; no failure and no source-pressure
//     cooldown.
//   - *PressureError (429, 503, a ban: 418, or 403 with Retry-After; open breaker, THROTTLED, no
//     pacing capacity): the job is parked until the provider allows it;
//     no failure is counted and no attempt used; the connector claims
//     nothing until then.
//   - any other error: a failure, with full-jitter backoff; errors marked
//     Permanent disable the job.
//
// ParseImport and Import.Apply turn a YAML file of connectors with pair,
// timeframe and type arrays into one job per combination, idempotently.
package job
