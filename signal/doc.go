// Package signal turns what a provider said about its limits into one
// normalized Report, and classifies an outcome as success, transient or
// permanent.
//
// Providers signal throttling in many dialects. Parse reads all of them from
// one response and merges what it finds:
//
//   - Retry-After (RFC 9110 section 10.2.3) as delay-seconds (decimal
//     seconds such as Shopify's "2.0" too) or as an HTTP-date in any of
//     its three forms (IMF-fixdate, RFC 850 with its two-digit year read
//     around now, asctime), clamped to [0, Config.MaxDelay]; a value that
//     is neither is ignored.
//   - The IETF RateLimit and RateLimit-Policy fields
//     (draft-ietf-httpapi-ratelimit-headers), parsed as RFC 9651 structured
//     field Lists, one member per policy: `RateLimit-Policy: "day";q=1000;w=86400,
//     "burst";q=100;w=60` and `RateLimit: "burst";r=50;t=30`. The earlier
//     drafts' Dictionary form (`RateLimit: limit=100, remaining=50, reset=30`)
//     and separate RateLimit-Limit / -Remaining / -Reset fields are read too.
//   - X-RateLimit-Limit / -Remaining / -Reset (and the X-Rate-Limit-*
//     spelling). The reset is told apart by its size: see ResetDelay.
//     Discord's X-RateLimit-Reset-After (seconds with a fraction) wins
//     over the reset, which may also be an RFC 3339 time (Atlassian's); a
//     decimal count (Reddit's "596.0") counts by its whole part.
//     HubSpot's X-HubSpot-RateLimit-Max / -Remaining are a quota over
//     X-HubSpot-RateLimit-Interval-Milliseconds.
//   - Shopify: the REST X-Shopify-Shop-Api-Call-Limit header ("32/40") and
//     the GraphQL extensions.cost object of a JSON body (requestedQueryCost,
//     actualQueryCost, throttleStatus), including THROTTLED errors inside an
//     HTTP 200.
//   - Binance: X-MBX-USED-WEIGHT-(n)(unit) and X-MBX-ORDER-COUNT-(n)(unit)
//     usage headers, and 418 IP bans.
//   - OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens} (the
//     reset a duration, "6m0s") and Anthropic's
//     anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
//     {limit,remaining,reset} (the reset an RFC 3339 time): quotas a
//     minute, named "requests", "tokens" and so on; the wait of Azure's
//     and OpenAI's retry-after-ms (and x-ms-retry-after-ms), which wins
//     over Retry-After; and 529, a provider overloaded (Anthropic), a
//     throttle like 503.
//   - The exact wait in a 429's JSON body (Discord's "retry_after": 64.57,
//     seconds), which wins over a Retry-After header that rounds it up.
//   - GitHub's 403 over a rate limit: a 403 with a Retry-After (a secondary
//     limit) or with the quota it states exhausted (a primary one) is a
//     throttle, transient; any other 403 is permanent.
//
// Every policy found is kept in Report.Policies; the headline quota
// (Limit, Remaining, ResetAfter) is the most constraining one.
//
// Like the other pure packages, times are int64 Unix microseconds and
// durations int64 microseconds; the caller passes now. Nothing here blocks,
// does I/O, starts goroutines or reads a clock. Header parsing does not
// allocate; parsing a GraphQL body does.
package signal
