package provider

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sluicerl/sluice/store"
)

// SchemaVersion is the profile file format this package reads. A file
// states it as `schema: 1`; a file of another schema is refused.
const SchemaVersion = 1

// Profile is one provider's limits as data: what a key of the provider may
// spend, how each response updates it, and what its answers mean. Build
// one with Parse, LoadFile or a Set; a Profile is immutable once built and
// safe for concurrent use. The zero value is not a usable profile.
type Profile struct {
	// Name identifies the profile ("shopify-graphql").
	Name string
	// Revision is the profile data's own version (a date such as
	// "2026-11-26"): a change to any limit is a new revision.
	Revision string
	// Description and Docs (the provider's documentation URLs) are free
	// text shown by `sluice providers show`.
	Description string
	Docs        []string
	// Key is how a caller's key (a shop, a host, an account) is
	// normalized before it names any state: see KeyRule.
	Key KeyRule
	// ResourceHeader names the response header that says which resource a
	// response's quota headers describe (GitHub's X-RateLimit-Resource);
	// empty when the provider has one quota per key.
	ResourceHeader string
	// DefaultResource is the resource of a route that names none.
	DefaultResource string
	// BanDefault is how long a ban lasts when the provider banned without
	// saying for how long.
	BanDefault time.Duration
	// Limits are the rate limits every call is charged against, all or
	// nothing.
	Limits []Limit
	// Leases are the concurrency limits: a permit held by the caller
	// around long work (Shopify bulk operations, HoldExplicit), or by the
	// Runtime around every call (GitHub's concurrent requests, HoldCall).
	Leases []Lease
	// Routes give a call's costs and resource by method and path.
	Routes []Route
	// Outcomes say which answers are throttling, bans, unknown outcomes
	// and permanent errors.
	Outcomes Outcomes
}

// KeyRule is how a profile normalizes keys.
type KeyRule string

// The key rules.
const (
	// KeyExact uses the key as given.
	KeyExact KeyRule = "exact"
	// KeyLower lower-cases the key and trims surrounding space.
	KeyLower KeyRule = "lower"
	// KeyHost reduces a URL or host to its lower-cased host (with a
	// non-default port), as outbound.HostKey does.
	KeyHost KeyRule = "host"
	// KeyShopifyShop reduces any spelling of a Shopify shop to its
	// canonical myshopify domain: see NormalizeShop.
	KeyShopifyShop KeyRule = "shopify-shop"
)

var keyRules = []KeyRule{KeyExact, KeyLower, KeyHost, KeyShopifyShop}

// Algorithm is how a Limit counts. Both buckets are GCRA in the store: a
// token bucket of Capacity refilled at Rate per Per admits exactly what a
// leaky bucket (as a meter) of that size leaking at that rate admits.
type Algorithm string

// The algorithms.
const (
	TokenBucket   Algorithm = "token_bucket"
	LeakyBucket   Algorithm = "leaky_bucket"
	GCRA          Algorithm = "gcra"
	FixedWindow   Algorithm = "fixed_window"
	SlidingWindow Algorithm = "sliding_window"
)

var algorithms = []Algorithm{TokenBucket, LeakyBucket, GCRA, FixedWindow, SlidingWindow}

func (a Algorithm) windowed() bool { return a == FixedWindow || a == SlidingWindow }

// Charge names what a call spends of a limit.
const (
	// ChargeRequest charges one unit per call (the default).
	ChargeRequest = "request"
	// ChargeCost charges the call's own Cost (a GraphQL query's requested
	// cost), settled to the actual cost afterwards.
	ChargeCost = "cost"
)

// Limit is one rate limit of a key. A plain value.
type Limit struct {
	Name string
	// Scope names what the limit is kept per ("shop", "ip", "account",
	// "token"): a call gives one key per scope.
	Scope string
	// Unit is what the limit counts: requests, points, weight, orders.
	Unit      string
	Algorithm Algorithm
	// Capacity is the bucket's size (buckets and GCRA: the burst) or the
	// window's limit (windows).
	Capacity int64
	// Rate units are restored every Per (buckets and GCRA only).
	Rate int64
	Per  time.Duration
	// Window is a window's length (windows only); windows are aligned to
	// the store's clock, as exchanges align theirs to the wall clock.
	Window time.Duration
	// Charge is what a call spends: ChargeRequest, ChargeCost, or the name
	// of a cost its route lists ("weight", "orders"); a route without that
	// cost spends nothing of the limit.
	Charge string
	// Resource, when set, restricts the limit to calls of that resource
	// (GitHub's core, search, graphql).
	Resource string
	// Sync says how responses update the limit; nil when they do not.
	Sync *Sync
	// Description is free text.
	Description string
}

// StoreLimit returns the store limit that enforces l, named name.
func (l Limit) StoreLimit(name string) store.Limit {
	switch l.Algorithm {
	case FixedWindow:
		return store.Limit{Name: name, Algorithm: store.FixedWindow, Rate: l.Capacity, Period: l.Window}
	case SlidingWindow:
		return store.Limit{Name: name, Algorithm: store.SlidingWindow, Rate: l.Capacity, Period: l.Window}
	}
	return store.Limit{Name: name, Algorithm: store.GCRA, Rate: l.Rate, Period: l.Per, Burst: l.Capacity}
}

// Sync is how a response updates a limit: which policy of the response
// (as package signal reads it) reports the limit's state. The provider's
// count wins when it is higher than the local one; a lower count never
// gives budget back.
type Sync struct {
	// Source is the signal dialect: one of SyncSources.
	Source string
	// Policy, when set, is the reported policy's name (Binance's "weight"
	// or "orders", an IETF policy name).
	Policy string
	// Window, when set, is the reported policy's window (Binance's
	// X-MBX-USED-WEIGHT-1M is a minute).
	Window time.Duration
	// Learn takes the limit's capacity and rate from what the provider
	// reports (Shopify's maximumAvailable and restoreRate, an IETF
	// policy's quota and window) instead of the profile's numbers, which
	// then only bootstrap the key until its first response.
	Learn bool
}

// SyncSources are the dialects a Sync may name, as package signal parses
// them.
var SyncSources = []string{"shopify-graphql", "shopify-rest", "binance", "x-ratelimit", "ietf"}

// Lease is a concurrency limit: at most Permits holders per key at once.
type Lease struct {
	Name    string
	Scope   string
	Permits int64
	TTL     time.Duration
	// Hold says who holds the permits: HoldExplicit (the caller, with
	// Profile.LeaseParams) or HoldCall (the Runtime, one permit around
	// every call). Load makes an empty hold HoldExplicit.
	Hold        Hold
	ByVersion   []VersionPermits
	Description string
}

// Hold says who holds a lease's permits.
type Hold string

const (
	// HoldExplicit (YAML hold: explicit, the default): the caller holds a
	// permit around its own long work, with a lease.Leaser and the
	// lease.Params of Profile.LeaseParams (Shopify bulk operations).
	HoldExplicit Hold = "explicit"
	// HoldCall (YAML hold: call): the Runtime holds one permit around
	// every call, from Reserve to Settle (Transport: until the response
	// body is closed), waiting for one to free (GitHub's 100 concurrent
	// requests per token).
	HoldCall Hold = "call"
)

// VersionPermits changes a lease's permits from an API version on.
type VersionPermits struct {
	// From is the first API version (YYYY-MM, compared as text; "unstable"
	// sorts after every dated version) that has Permits.
	From    string
	Permits int64
}

// PermitsFor returns the lease's permits under API version v: the permits
// of the latest ByVersion entry whose From is at or before v, else
// Permits. An empty v means the latest version.
func (l Lease) PermitsFor(v string) int64 {
	p := l.Permits
	for _, bv := range l.ByVersion {
		if v == "" || versionAtOrAfter(v, bv.From) {
			p = bv.Permits
		}
	}
	return p
}

func versionAtOrAfter(v, from string) bool {
	if v == "unstable" {
		return true
	}
	if from == "unstable" {
		return false
	}
	return v >= from
}

// Route is what calls matching Method and Path cost.
type Route struct {
	// Method is an HTTP method or "*" for any.
	Method string
	// Path is a URL path; a trailing "*" matches any rest.
	Path string
	// Costs are named costs a Limit's Charge refers to ("weight": 4).
	Costs map[string]int64
	// Resource is the route's resource; empty means the profile's
	// DefaultResource.
	Resource string
	// Idempotent says whether a call of the route may be retried after an
	// unknown outcome (a 5xx after an order was sent). Nil means by
	// method: GET, HEAD, OPTIONS, PUT and DELETE are.
	Idempotent *bool
}

func (r Route) matches(method, path string) bool {
	if r.Method != "*" && !strings.EqualFold(r.Method, method) {
		return false
	}
	if p, ok := strings.CutSuffix(r.Path, "*"); ok {
		return strings.HasPrefix(path, p)
	}
	return r.Path == path
}

// Route returns the first route matching method and path, or false.
func (p *Profile) Route(method, path string) (Route, bool) {
	for _, r := range p.Routes {
		if r.matches(method, path) {
			return r, true
		}
	}
	return Route{}, false
}

// Rule matches a response: a status (any of Status, or any status when
// Status is empty) and optionally a GraphQL error code and a condition.
type Rule struct {
	Status []int
	// GraphQL is a GraphQL error code the body must carry: THROTTLED or
	// MAX_COST_EXCEEDED (what package signal reads).
	GraphQL string
	// If is a further condition: "retry_after" (the response said when to
	// come back) or "exhausted" (a quota header says nothing remains).
	If string
}

// Outcomes classify responses. A response matching a Ban rule is a ban;
// else a Throttle rule, throttling; else a Permanent rule, a permanent
// error (never retried); else an Unknown rule on a route that is not
// idempotent, an unknown outcome (never retried blindly).
type Outcomes struct {
	Throttle  []Rule
	Ban       []Rule
	Unknown   []Rule
	Permanent []Rule
}

// Scopes returns the scopes the profile's limits and leases are kept per,
// sorted.
func (p *Profile) Scopes() []string {
	var s []string
	for _, l := range p.Limits {
		s = append(s, l.Scope)
	}
	for _, l := range p.Leases {
		s = append(s, l.Scope)
	}
	slices.Sort(s)
	return slices.Compact(s)
}

// CallLeases returns the leases the Runtime holds around every call
// (HoldCall), in profile order.
func (p *Profile) CallLeases() []Lease {
	var out []Lease
	for _, l := range p.Leases {
		if l.Hold == HoldCall {
			out = append(out, l)
		}
	}
	return out
}

// Lease returns the named lease.
func (p *Profile) Lease(name string) (Lease, bool) {
	for _, l := range p.Leases {
		if l.Name == name {
			return l, true
		}
	}
	return Lease{}, false
}

// NormalizeKey applies the profile's key rule to key; see KeyRule.
func (p *Profile) NormalizeKey(key string) (string, error) {
	k, err := p.Key.Normalize(key)
	if err != nil {
		return "", fmt.Errorf("provider %s: %w", p.Name, err)
	}
	return k, nil
}
