// Package server is Sluice's HTTP JSON API over a limiter.Limiter. It is a
// library: New builds a Server and Handler returns an http.Handler that the
// caller mounts on servers it owns (cmd/sluice's serve command is one such
// caller).
//
// # Endpoints
//
//	POST   /v1/take              take units of one policy, or of several all-or-nothing
//	POST   /v1/leases            acquire a lease of a concurrency policy (lease.go)
//	GET    /v1/leases?policy=&key=  list a key's holders
//	POST   /v1/leases/{id}/renew renew a lease
//	DELETE /v1/leases/{id}       release a lease
//	GET  /v1/policies   list the policies
//	GET  /healthz       {"status":"ok"}
//	GET  /metrics       Prometheus metrics
//	GET  /openapi.json  the OpenAPI 3.1 document of every endpoint (openapi.yaml, also OpenAPI())
//	POST /v1/outbound/acquire, POST /v1/outbound/report, GET /v1/outbound/{key}
//	                    adaptive calls (with Config.Outbound; see below)
//	POST /v1/admin/reload  reread the configuration (Config.Reload; reload.go)
//
// With Config.Slots, also the slot API of seed 003 (see slot.go): POST
// /api/v1/slots, POST /api/v1/slots/batch, GET /api/v1/slots/{eventId},
// POST /admin/rate-limit/config, GET /admin/rate-limit/config/{name}, POST
// /admin/rate-limit/config/{name}/deactivate, POST
// /admin/rate-limit/cache/flush, GET /admin/rate-limit/verify.
//
// Config.Observer, when set, sees every counted decision with its key,
// every lease acquire and the slot configs served (observer.go): the live
// feed of the dashboard, package server/dashboard, which `sluice serve`
// mounts at /ui/ beside these routes.
//
// A single take is {"policy":"api","key":"user-42","cost":1}: cost is a
// whole number from 0 to 2^53, 1 when omitted (or null), and 0 peeks without
// taking. The answer is
//
//	{"allowed":true,"policy":"api","limit":100,"remaining":99,
//	 "retryAfterMs":0,"resetAfterMs":600,"shadowed":false}
//
// with status 200 when allowed and 429 when denied (same body, plus a
// Retry-After header in whole seconds, at least 1). limit is the most one
// request may cost (the burst, or the window's limit); retryAfterMs and
// resetAfterMs are rounded up. A shadow policy never denies: a would-be
// denial answers 200 with "shadowed":true.
//
// {"items":[{"policy":"weight","key":"ip-1","cost":5},{"policy":"orders","key":"acct-9"}]}
// takes every item or none (limiter.Limiter.AllowAll) and answers
//
//	{"allowed":false,"retryAfterMs":2400,"items":[<one single answer per item>]}
//
// where retryAfterMs is when the whole request could pass and each item's
// allowed says whether that policy alone had room; nothing is charged
// unless the top-level allowed is true. At most Config.MaxItems items (64).
//
// Every take answer carries the IETF draft-ietf-httpapi-ratelimit-headers
// fields, one list member per policy (for several items of one policy, the
// least remaining and the latest reset):
//
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=99;t=1
//
// q is the policy's rate (GCRA) or limit (windows) per w seconds; a period
// that is not whole seconds is stated over the next whole second with q
// scaled down. r is what remains and t the seconds, rounded up, until the
// key is back to its full quota. Take answers are Cache-Control: no-store.
//
// An answer the shared store did not decide (see store/guard) says so: a
// Sluice-Outage header naming the policy's outage mode and the reason,
//
//	Sluice-Outage: fail_closed;reason=store_down
//
// and "outage" and "outageReason" fields in the decision (absent when the
// store decided). reason is store_down (the store is held down; the outage
// mode decided) or timeout (the store is up but did not answer this call
// in time: denied in every mode, since the store may still apply it). A
// 429 with Sluice-Outage is not the limit being spent.
//
// # Leases
//
// POST /v1/leases {"policy":"bulk","key":"shop-1","holder":"worker-7"}
// (holder optional: the server makes one up) answers 201 with
//
//	{"id":"...","policy":"bulk","key":"shop-1","holder":"worker-7","token":42,
//	 "expiresAt":"2030-01-01T00:00:30Z","ttlMs":30000,"permits":5,"held":1}
//
// and a Location header. id is opaque and names everything a renew or
// release needs, so any server of a fleet sharing a store answers it. The
// holder id is the lease's secret: whoever knows it (with the policy and
// key) can renew, release, or re-acquire the lease, so let the server make
// one up (96 random bits) or choose an unguessable one. GET
// /v1/leases?policy=&key= lists the live leases by token with a holder
// fingerprint (holderHash: the first 16 hex digits of the holder id's
// SHA-256), never their ids or holder ids. When
// every permit is held the answer is 409 TypeLeaseUnavailable with
// retryAfterMs and Retry-After (when the first holder's lease ends at the
// latest). "items":[...] adds rate items, taken all-or-nothing with the
// lease in one store operation: if a rate refuses, 429 TypeRateLimited and
// nothing is taken. Renewing or releasing a lease that is not held (expired,
// released, superseded) is 404 TypeLeaseNotHeld; a stale release never
// frees a successor's permit. An id that is not one the API could have
// issued (not base64url of [policy, key, holder, token] with identifiers
// that follow the rule and a token of at least 1) is 422
// TypeInvalidRequest pointing at #/path/id, and touches no store.
//
// # Adaptive calls (outbound.go)
//
// With Config.Outbound, workers in any language pace, adapt and break their
// calls to an upstream with package outbound's per-key state, shared
// through the store with every server and Go client of the fleet:
//
//	POST /v1/outbound/acquire  {"key":"api.example.com","waitMs":500,"idempotent":true,"profile":"..."}
//	POST /v1/outbound/report   {"permit":"...","status":429,"headers":{"Retry-After":"2"},
//	                            "latencyMs":12.5,"body":"<JSON excerpt>","attempt":1}
//	GET  /v1/outbound/{key}    the key's state: rate, spacing, pause, latency, counters, breaker
//
// acquire answers 200 {"permit","key","grantedAt","expiresAt","waitedMs"}
// once the key's turn has come (waiting at most waitMs, 0 by default, up
// to MaxOutboundWait), 429 TypeOutboundWait with retryAfterMs, paused
// (a Retry-After, a ban or an exhausted quota pauses the key fleet-wide)
// and busy, or 503 TypeBreakerOpen while the key's breaker is open. The
// worker calls the upstream only with a permit, then reports its answer:
// the status (or "error": timeout, connect, network, canceled, other), the
// headers the signal parsers read (Retry-After, RateLimit*,
// X-RateLimit-*, X-MBX-*, X-Shopify-*; others are ignored), the latency,
// and optionally a JSON body excerpt for GraphQL throttleStatus and
// THROTTLED errors. The answer says how the response was read and whether
// to retry: {"class","throttled","banned","unknown","retry","retryAfterMs",
// "stop","rate","pausedForMs","permitKnown"}. A permit is reported once
// (again: 409 TypePermitDone) within Config.PermitTTL (1 min), after which
// its attempt is taken as never made. Permits live in the server that
// granted them; a report of a permit this server does not hold (another
// server's, or expired) still feeds the key's rate and the fleet's pause
// (permitKnown false) but not the breaker or retry budget. "profile" names
// a provider profile through Config.Profiles (422 TypeUnknownProfile).
//
// # Provider profiles (providers.go)
//
// With Config.Providers (a provider.Registry; `sluice serve --profiles
// FILE` overrides the built-in profiles, reloaded with the policies):
//
//	GET /v1/providers          {"providers":[{"name","revision","description","origin","scopes"}]}
//	GET /v1/providers/{name}   one profile: its limits, leases and routes (404 TypeUnknownProfile)
//
// and acquire's "profile" (with "method", "path" and "cost" pricing the
// call) applies it as outbound.AcquireOpts.Profile does: the key is
// normalized by the profile's key rule, the provider's limits are reserved
// before the permit is granted (a call that would not fit is 429 with how
// long until it would), and the report settles them with the response (the
// actual cost, the provider's own count, a Retry-After or a ban for the
// fleet); the report's "profile" says what the profile made of it (ok,
// throttled, banned, unknown, permanent, failed), and an unknown outcome or
// a permanent error is never advised a retry (stop unknown_outcome,
// permanent).
// # Authentication (auth.go)
//
// With Config.Auth, every route needs "Authorization: Bearer <token>" of a
// token holding the route's scope (package auth): each entry of the route
// table names exactly one, and New refuses a route without. /healthz and
// /metrics are open (auth.Public): they carry no keys and no secrets, and
// probes and scrapers should not need a token; so are the 404 and 405
// answers, which only list endpoints. No token, a malformed header or an
// unknown token is 401 TypeUnauthorized with "WWW-Authenticate: Bearer
// realm="sluice"" (plus error="invalid_token" for a bad token, RFC 6750);
// a token without the scope is 403 TypeForbidden with error=
// "insufficient_scope" and the scope it needs.
//
//	take   POST /v1/take
//	lease  POST /v1/leases, POST /v1/leases/{id}/renew, DELETE /v1/leases/{id}
//	slots  POST /api/v1/slots, POST /api/v1/slots/batch
//	jobs   POST /v1/jobs/claim, POST /v1/jobs/{id}/{op} (worker protocol, trigger)
//	admin  POST /v1/admin/reload, slot configs (POST /admin/rate-limit/...),
//	       GET /admin/rate-limit/verify, PUT connectors, jobs and job-group
//	       weights, pause and resume
//	read   every other GET but /healthz and /metrics
//
// With auth, a lease's holder is bound to the token that acquired it: it is
// stored as "<token name>/<holder>" (the answer's holder field shows it),
// and a renew or release with another token is 403, even when that token
// knows the lease id. Without auth the lease id (holder id and fencing
// token) is the credential, as before.
//
// # Reload (reload.go)
//
// Server.Reload swaps in a new Limiter's policies as one immutable
// snapshot: each request loads the snapshot once, so it sees the old
// policies or the new ones, never a mix. A policy removed by a reload
// answers 404 TypePolicyRemoved (takes, lease acquires, renews and
// releases); a policy never held is still 422 TypeUnknownPolicy. POST
// /v1/admin/reload runs Config.Reload (the CLI rereads --config and
// --tokens): 200 with the new policy listing, or 422 TypeInvalidConfig
// with every error (file:line:col) and the old configuration in force.
//
// # Idempotency-Key (idempotency.go)
//
// POST /v1/take, POST /v1/leases, POST /api/v1/slots and POST
// /api/v1/slots/batch honour an Idempotency-Key header (1 to 255 visible
// ASCII characters): a retry with the same key and body gets the first
// answer again with "Idempotent-Replayed: true" and is not charged; the
// same key with another body is 422 TypeIdempotencyKeyReused; a retry
// while the first is still running is 409 TypeIdempotencyInFlight with
// Retry-After: 1. Keys are per token (per caller), per route. Answers are
// remembered in this server process's memory only, not in the state
// store: behind a load balancer, a retry reaching another server is
// charged again. They are kept Config.Idempotency.TTL (24h), bounded by
// MaxKeys (100,000) and MaxBytes (64 MiB), oldest dropped first; 5xx
// answers are not remembered (nothing was decided; the retry runs).
//
// # Errors
//
// Every endpoint reads its JSON body the same strict way: field names
// match exactly (case included), unknown fields and fields named twice are
// refused, and nothing may follow the object.
//
// Errors are RFC 9457 application/problem+json bodies with type, title,
// status and detail; field errors add "errors":[{"pointer":"#/items/2/cost",
// "detail":"..."}] naming each wrong field as a JSON Pointer.
//
//	400 TypeMalformedRequest  not JSON, trailing data, an unknown field, a wrong JSON type,
//	                          a field named twice in one object
//	413 about:blank           body over Config.MaxBodyBytes (4 MiB); the detail names the cap
//	415 about:blank           Content-Type is not application/json (charset, if any, utf-8)
//	422 TypeInvalidRequest    empty policy or key, negative, fractional or > 2^53 cost,
//	                          empty or too many items, both single fields and items,
//	                          an identifier that breaks store.CheckID's rule (also in a
//	                          path or query: #/path/eventId, #/query/key), a JSON string
//	                          that is not text (invalid UTF-8, a lone \ud800)
//	422 TypeUnknownPolicy     a policy the server does not hold
//	422 TypeCostExceedsLimit  a cost above the policy's burst or window limit
//	401 TypeUnauthorized      no bearer token, a malformed one, an unknown one (with auth)
//	403 TypeForbidden         the token lacks the route's scope; a lease of another token
//	404 TypePolicyRemoved     a policy a reload removed
//	409 TypeIdempotencyInFlight   the first request with this Idempotency-Key still runs
//	422 TypeIdempotencyKeyReused  an Idempotency-Key sent again with another body
//	422 TypeInvalidConfig     POST /v1/admin/reload refused the configuration
//	431 (net/http)            request headers over the server's MaxHeaderBytes
//	404 about:blank           no such endpoint (the detail lists every endpoint)
//	405 about:blank           wrong method (with an Allow header)
//	500 about:blank           a bug (a recovered panic, logged)
//	503 TypeStoreUnavailable  the rate store could not decide (with Retry-After: 1)
//
// An unknown policy is 422, not 404: the endpoint exists and the request is
// well formed, but names something the server does not hold. When several
// fields are wrong, every one is listed and the type is theirs if they share
// one, else TypeInvalidRequest.
//
// # Metrics
//
//	sluice_decisions_total{policy,result}        result: allowed, denied, shadow_denied, error
//	sluice_decision_duration_seconds{policy}     histogram of limiter time
//	sluice_http_requests_total{route,code}
//	sluice_lease_operations_total{policy,op,result}  op: acquire, renew, release;
//	                          result: ok, unavailable, rate_limited, not_held, invalid, error
//
// Label values come only from configured policy names, fixed route names
// and status codes. Keys never appear in metrics or in the server's own log
// lines, and a request for
// a policy the server does not hold counts as policy="unknown", so clients
// cannot grow the number of series. Items of a refused all-or-nothing take
// count as denied: nothing was charged.
package server
