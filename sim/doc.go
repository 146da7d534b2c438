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
// RateLimit and RateLimit-Policy fields, and Shopify's REST Admin API: a
// leaky bucket of ProviderConfig.BucketSize requests leaking at the limit,
// X-Shopify-Shop-Api-Call-Limit on every answer and 429 with Retry-After
// "2.0" when full. ProviderConfig.BanOnRefusals
// makes a banning provider count every refusal, not only those of a
// client that did not back off; FixedWindow makes a token-bucket dialect
// count requests in windows aligned to the clock; RetryAfterMillis sends
// delay-seconds to the millisecond, the exact wait for the next token.
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
// ProfileProvider simulates the providers of the profiles in package
// provider (shopify-graphql, shopify-rest, binance, github), per key and
// written from their documentation: Shopify's cost bucket with requested
// and actual costs, THROTTLED and MAX_COST_EXCEEDED; its REST leaky bucket
// with X-Shopify-Shop-Api-Call-Limit and Retry-After "2.0"; Binance's
// weight and order windows aligned to the clock with 429s escalating to
// 418 bans; GitHub's x-ratelimit-* primary limit.
//
// Providers take a clock.Clock; HandlerTransport serves a handler in
// process, without TCP, so that many simulations can run side by side on a
// small machine.
package sim
