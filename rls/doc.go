// Package rls is a drop-in for envoyproxy/ratelimit: Envoy's global rate
// limit service (gRPC envoy.service.ratelimit.v3.RateLimitService,
// ShouldRateLimit) over Sluice's limiter.
//
// It reads envoyproxy/ratelimit's YAML configuration unchanged (Parse,
// LoadFiles; see config.go for the format and the few configs it refuses
// where envoyproxy/ratelimit would silently misread them) and maps every
// rate_limit onto a Sluice GCRA policy (Rules.Policies), named
// "rls:DOMAIN.KEY_VALUE.KEY..." after the rule, and every request
// descriptor onto a key of that policy ("k1=v1&k2=v2", key.go). The
// policies live in the same limiter.Limiter as the HTTP API's, so both
// share their state, on every store: memory, Redis, PostgreSQL, SQLite.
//
// Matching is envoyproxy/ratelimit's: per level, key and value, then the
// first wildcard value ("foo*") whose prefix the value has, then the key
// alone; a limit applies only when the descriptor ends at its level.
// unlimited rules answer OK with limit_remaining 4294967295 and touch no
// store; requests_per_unit 0 refuses every request; replaces drops the
// named limits of the same request; shadow_mode and quota_mode rules are
// counted and never refuse; hits_addend (per descriptor, else per request,
// 0 meaning 1) is the cost. A descriptor's own limit (Envoy's limit
// override) replaces the configured one, decided after the others
// (override.go). A descriptor with is_negative_hits is checked without
// being charged (no refunds).
//
// # Semantics: GCRA, not fixed windows
//
// envoyproxy/ratelimit counts requests_per_unit per fixed window aligned
// to the clock (per second, minute, ...), so up to twice the limit passes
// within moments across a window edge: N at the end of one window, N more
// at the start of the next. Sluice paces each rule with GCRA at
// requests_per_unit per unit with a burst of requests_per_unit: a key
// that has been idle a whole unit may take the full limit at once (as in
// a fresh window), after which requests pass at the rate, evenly, as the
// budget refills. In any span of time t at most N + N*t/unit pass, never
// 2N in a moment; the long-run rate is the same. Over a span of a whole
// unit the bound is 2N for both, but a fixed window reaches it in a few
// milliseconds and GCRA only by spending a full burst at both ends of the
// unit. Statuses report what GCRA knows: limit_remaining is what could be
// taken right now, and duration_until_reset is, when the descriptor is
// OK, the time until its budget is full again and, when it is over the
// limit, the time until this request would pass (both rounded up to whole
// seconds); envoyproxy/ratelimit reports the time to the window's end in
// both cases.
//
// A request's descriptors are charged all or nothing, in one store
// operation: when any is over its limit, none is charged (envoyproxy/
// ratelimit charges every descriptor whatever the outcome, so a refused
// request still spends the budgets of the others).
//
// # Errors
//
// A request without a domain or descriptors, with more than
// Config.MaxDescriptors descriptors or MaxEntries entries, is
// InvalidArgument. A store error, or a store the guard holds down while
// the policies fail closed, is Unavailable, so that Envoy's own
// failure_mode_deny decides, as when envoyproxy/ratelimit's Redis fails;
// fail_open and local outage answers are given as decided.
//
// # Serving
//
// NewServer builds a grpc.Server with the service, the standard health
// service and reflection, and takes the caller's options and interceptors
// (authentication is plugged in there). Response headers (X-RateLimit-*,
// or the IETF RateLimit and RateLimit-Policy fields) are chosen by
// Config.Headers. Prometheus metrics mirror envoyproxy/ratelimit's stats
// (metrics.go).
package rls
