// Package limiter is the facade Go programs call to stay inside rate limits.
//
// A Limiter holds named policies (GCRA, fixed window or sliding window, each
// with a rate, a period and, for GCRA, a burst) over a store.RateStore: the
// in-memory store by default, or a shared store (Redis, PostgreSQL) so that
// every process enforces one limit together. Policies come from a YAML file
// (LoadFile, Parse) or are built in Go.
//
// The call families follow golang.org/x/time/rate:
//
//   - Allow / AllowN decide now and never block. A denial is a Decision
//     with Allowed == false, not an error.
//   - Reserve / ReserveN take the units now and say when they may be used;
//     Settle corrects the charge to the actual cost, Cancel refunds it.
//   - Wait / WaitN block until the units are granted, honour ctx, and fail
//     at once when the wait would outlast ctx's deadline.
//   - AllowAll / WaitAll take several policies all-or-nothing (an exchange's
//     weight-per-minute and orders-per-10s at once): either every one is
//     charged or none is.
//
// A policy in shadow mode is evaluated and counted but never denies: its
// would-be denials come back as Decision.Shadowed.
//
// A policy with algorithm concurrency (Permits, TTL) is a lease, not a
// rate: Acquire, Renew, Release and Holders work on its permits in
// Config.Leases (see package lease for waiting and keep-alive), and
// AllowAllAcquire takes rate policies and a lease all-or-nothing, in one
// store operation on every Sluice backend.
//
// Errors are for requests that can never succeed (an unknown policy, a cost
// above the burst) and for a store that could not answer.
package limiter
