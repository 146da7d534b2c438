// Package sim simulates rate-limited providers and runs fleets of workers
// against them, so that an outbound client's behaviour can be measured
// against a ceiling it does not know.
//
// A Provider is an http.Handler with a hidden policy: a limit in requests
// per second that may change mid-run (Config.Changes), enforced and
// signalled in one of the throttling dialects of seed 002 (Dialect): 429
// with Retry-After as delta-seconds or as an HTTP-date, a bare 429, 503, a
// silent slowdown whose latency grows with load, a ban that escalates after
// repeated violations (418), a Shopify-like GraphQL cost bucket that answers
// THROTTLED inside an HTTP 200 and refunds the unused cost, and an
// exchange-like weighted fixed window aligned to the clock that reports
// X-MBX-USED-WEIGHT, and a provider that states its policy in the IETF
// RateLimit and RateLimit-Policy fields. ProviderConfig.BanOnRefusals
// makes a banning provider count every refusal, not only those of a
// client that did not back off.
//
// Run drives N workers split over M processes (each with its own client
// built by Config.NewClient, sharing only what that client shares, such as
// a rate store) and records, second by second, the attempts offered to the
// provider, the attempts it admitted, the workers' goodput, throttle and
// ban responses, retries and the clients' adapted rate. Summarize turns
// those seconds into the figures of issue 5: goodput over the hidden limit
// after convergence, the throttle share, time to converge and settle time
// after a limit change.
//
// Providers take a clock.Clock; HandlerTransport serves a handler in
// process, without TCP, so that many simulations can run side by side on a
// small machine.
package sim
