// Package provider describes third-party APIs' limits as data, and applies
// them.
//
// A Profile (one YAML file, see load.go for the format) names the limits a
// key of the provider has (token or leaky buckets, GCRA, fixed or sliding
// windows, in requests, points, weight or orders, each kept per a scope such
// as the shop, the IP or the account), the concurrency limits held as
// leases (Shopify bulk operations, whose permits follow the API version),
// what each route costs, how each response updates the limits (which
// dialect of package signal reports them; the provider's count wins when
// it is higher), what counts as throttling, a ban, an unknown outcome and a
// permanent error, and how a key is normalized (NormalizeShop: one id per
// Shopify shop for its bucket, its bulk lease and its job group).
//
// The profiles built in (shopify-graphql, shopify-rest, shopify-bulk,
// binance, github, and ietf, the default for unknown providers) are
// embedded; Load overrides them with a user's files, and a Registry keeps
// a server's profiles when a reloaded file is malformed. Adding a provider
// is a YAML file and its tests, not a new code path.
//
// A Runtime applies one profile over a shared store (runtime.go): Reserve
// before a call charges every limit the call touches all or nothing (a
// GraphQL query's requested cost; a Binance order's weight and both order
// windows), and refuses without charging when the bucket cannot hold it,
// saying how long until it can; Settle after the call refunds the
// difference to the actual cost, syncs the limits from the response, and
// pauses the key for every process on a Retry-After or opens it for the
// length of a ban. A lease marked "hold: call" (GitHub's 100 concurrent
// requests per token) is held by the Runtime around every call (hold.go):
// Reserve waits for one permit of it (keyed by the lease's scope,
// normalized like the limits' keys, with a holder of its own and a
// fencing token, over the store the fleet shares: Config.Leases, else
// Store), Settle or Release frees it. Other leases ("hold: explicit", the
// default) are the caller's: Profile.LeaseParams (bulk.go) gives the
// lease.Params of one (a Shopify shop's bulk-query permits under an API
// version), held with a lease.Leaser over the same store.
//
// Transport is an http.RoundTripper over a Runtime: it waits for room
// (and for the per-call permits, which it holds until the response body is
// closed), sends, settles, and delays and resends throttled work; unknown outcomes
// (a 5xx after an order) and permanent errors (MAX_COST_EXCEEDED) are
// never retried. Under package outbound it is the Base
// (outbound.Config{Base: &provider.Transport{...}}): outbound's bulkhead,
// adaptive pacing, breaker and retry budget on top, the provider's exact
// accounting below, with no change to outbound. In a job handler,
// Ticket.Pressure and Outcome.Pressure give the source-pressure reason and
// wait that job.Pressure parks a job with (delayed, not failed).
package provider
