// Package retry decides whether and when to retry a failed call: full-jitter
// exponential backoff with a cap, a provider's Retry-After as the floor of
// the delay, a maximum number of attempts, idempotency, and a ratio retry
// budget shared by every call to a key.
//
// The budget bounds retries across all calls, not per call: a token bucket
// that every success refills by Config.BudgetRatio (about 20% of
// successful requests) plus a small floor of Config.BudgetFloor tokens per
// second, holding at most Config.BudgetCapacity; each retry takes one token.
// When the provider fails, successes stop, the bucket drains and retries
// stop with ErrBudgetExhausted: a retry storm cannot build up. That error is
// the caller's own limit speaking, never the provider's throttling, and is
// named apart from it.
//
// Only transient outcomes (timeouts, network errors, 408, 429, 5xx; see
// package signal) are retried. An outcome that may have been processed (a
// 5xx, a timeout or a connection lost after the request was sent) is
// retried only when the call is idempotent or the caller says repeating it
// is safe; otherwise retrying stops with ErrNotIdempotent.
//
// A caller fills an Attempt from package signal's Report: Outcome from
// Report.Class (ClassSuccess, ClassTransient, ClassPermanent,
// ClassCanceled map one to one), Unknown from Report.Unknown, RetryAfter
// and HasRetryAfter from the Report's.
//
// The core is pure: Policy.Decide takes the budget state, now (Unix
// microseconds) and a uniform random number, and returns a Decision.
// Retrier is the thin mutex wrapper holding one key's budget and a random
// source.
package retry
