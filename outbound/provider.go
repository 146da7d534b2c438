package outbound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sluicerl/sluice/provider"
	"github.com/sluicerl/sluice/signal"
	"github.com/sluicerl/sluice/store"
)

// Provider profiles (package provider) under the client: a profile's exact
// accounting of the provider's own limits (a Shopify query's points, a
// Binance route's weight, GitHub's per-resource quota), its outcome rules
// and its key normalization, applied below the adaptive layers.
//
//   - RoundTrip with Config.Profile: the Base is wrapped in a
//     provider.Transport (wait for the profile's limits, send, settle,
//     delay and resend throttled work).
//   - Acquire with AcquireOpts.Profile (or Config.Profile): the key is
//     normalized by the profile, and after the layers grant a turn the
//     call is reserved against the profile's limits; Report settles it
//     with the outcome. This is what the server's POST /v1/outbound/acquire
//     and /report do with their "profile" field.
//   - Do with DoOpts.Profile (job.Run.Call with a connector's profile):
//     every attempt is reserved before fn and settled after it.
//
// A profile lease held around every call (provider.HoldCall: GitHub's
// concurrent requests per token) is one permit per attempt, over
// Config.Leases: RoundTrip holds it until the response body is closed;
// Acquire waits for it within MaxWait (a *WaitError with Busy when none
// frees) and Report or Cancel frees it; Do waits for it within its context
// and frees it when fn returns.

// ErrUnknownProfile is wrapped by the errors of a call naming a profile
// the client's profiles do not hold.
var ErrUnknownProfile = errors.New("outbound: unknown provider profile")

// providers resolves profile names to Runtimes over the client's store,
// one Runtime per profile value: a reloaded profile (a new value) gets a
// new Runtime, the old ones are dropped with the set they came from.
type providers struct {
	reg    *provider.Registry
	prefix string
	c      *Client
	// leases keeps the permits of the leases profiles hold around every
	// call (GitHub's concurrent requests), one store for every Runtime.
	leases store.LeaseStore

	mu  sync.Mutex
	set *provider.Set
	rts map[*provider.Profile]*provider.Runtime
}

func newProviders(c *Client, reg *provider.Registry, leases store.LeaseStore) (*providers, error) {
	if reg == nil {
		s, err := provider.Embedded()
		if err != nil {
			return nil, fmt.Errorf("%w: provider profiles: %w", ErrInvalidConfig, err)
		}
		reg = provider.NewRegistry(s)
	}
	return &providers{reg: reg, prefix: c.prefix + "provider:", c: c, leases: leases}, nil
}

// callLeases picks the store of the per-call leases: ls, else the rate
// store when it keeps leases, else the leases it can keep (one for the
// client), else a new in-memory one.
func callLeases(ls store.LeaseStore, rates store.RateStore) store.LeaseStore {
	if ls != nil {
		return ls
	}
	if s, ok := rates.(store.LeaseStore); ok {
		return s
	}
	if k, ok := rates.(store.LeaseKeeper); ok {
		return k.KeepLeases()
	}
	return nil // provider.NewRuntime's default
}

// runtime returns the Runtime of the named profile.
func (ps *providers) runtime(name string) (*provider.Runtime, error) {
	set := ps.reg.Set()
	p, ok := set.Get(name)
	if !ok {
		return nil, fmt.Errorf("%w %q (have %v)", ErrUnknownProfile, name, set.Names())
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.set != set {
		ps.set, ps.rts = set, map[*provider.Profile]*provider.Runtime{}
	}
	if rt, ok := ps.rts[p]; ok {
		return rt, nil
	}
	rt, err := provider.NewRuntime(provider.Config{Profile: p, Store: ps.c.store, Leases: ps.leases, Prefix: ps.prefix, Clock: ps.c.clk, Signal: ps.c.signalCfg})
	if err != nil {
		return nil, err
	}
	ps.rts[p] = rt
	return rt, nil
}

// ProviderCall describes a call for its provider profile: what its route
// is and what it costs. The zero value is one unit of the profile's
// default route under the call's key.
type ProviderCall struct {
	// Key, when set, is the provider key (the shop, the account) when it
	// is not the call's key; Keys gives one per scope where they differ.
	Key  string
	Keys map[string]string
	// Method and Path select the profile's route (its costs and resource).
	Method, Path string
	// Cost is what limits charged by cost spend (a GraphQL query's
	// requested cost). Zero means 1.
	Cost int64
}

func (pc ProviderCall) call(key string) provider.Call {
	k := pc.Key
	if k == "" {
		k = key
	}
	return provider.Call{Key: k, Keys: pc.Keys, Method: pc.Method, Path: pc.Path, Cost: pc.Cost}
}

// profileFor returns the Runtime of a call's profile (the call's own, else
// the client's), or nil when it has none.
func (c *Client) profileFor(name string) (*provider.Runtime, error) {
	if name == "" {
		name = c.profile
	}
	if name == "" {
		return nil, nil
	}
	return c.providers.runtime(name)
}

// ProfileKey returns key normalized by the named profile (a Shopify shop's
// canonical domain), key itself when name is empty and the client has no
// profile, or an error wrapping ErrUnknownProfile or naming why the
// profile refuses the key.
func (c *Client) ProfileKey(name, key string) (string, error) {
	rt, err := c.profileFor(name)
	if err != nil || rt == nil {
		return key, err
	}
	return rt.Profile().NormalizeKey(key)
}

// reserve reserves a call against rt's limits, waiting at most until
// deadline (client clock, µs); a reservation that cannot pass by then is a
// *WaitError saying how long until it could.
func (c *Client) reserve(ctx context.Context, rt *provider.Runtime, key string, call provider.Call, deadline int64) (*provider.Ticket, error) {
	for {
		// A permit of a lease held around every call (GitHub's concurrent
		// requests) is waited for within the same deadline.
		t, err := rt.ReserveWithin(ctx, call, time.Duration(max(deadline-c.now(), 0))*time.Microsecond)
		if err != nil {
			return nil, err
		}
		if t.OK {
			return t, nil
		}
		if t.Busy {
			return nil, &WaitError{Key: key, Busy: true}
		}
		now := c.now()
		if now+t.Delay.Microseconds() > deadline {
			return nil, &WaitError{Key: key, RetryAfter: t.Delay, Paused: t.Reason == "paused" || t.Reason == "banned"}
		}
		if err := sleep(ctx, c.clk, max(t.Delay, time.Millisecond)); err != nil {
			return nil, err
		}
	}
}

// settle settles a ticket with an attempt's outcome and folds what the
// profile made of it into v.
func settle(ctx context.Context, rt *provider.Runtime, t *provider.Ticket, in signal.Response, v *Verdict) error {
	o, err := rt.Settle(context.WithoutCancel(ctx), t, in)
	if v == nil {
		return err
	}
	v.Profile = o.Kind.String()
	switch o.Kind {
	case provider.Throttled:
		v.Throttled = true
	case provider.Banned:
		v.Banned = true
	case provider.Unknown:
		v.Unknown, v.Retry, v.Stop = true, false, ErrUnknownOutcome
	case provider.Permanent:
		v.Retry, v.Stop = false, ErrPermanent
	}
	if v.Retry && o.Delay > v.RetryAfter {
		v.RetryAfter = o.Delay
	}
	return err
}

// Errors a Verdict's Stop carries when a call's provider profile forbids
// a retry.
var (
	// ErrUnknownOutcome: the profile read the outcome as unknown (a 5xx
	// after an order was sent): check the provider before trying again.
	ErrUnknownOutcome = errors.New("outbound: provider profile: unknown outcome, never retried blindly")
	// ErrPermanent: the profile read the outcome as permanent
	// (MAX_COST_EXCEEDED): the same call fails again.
	ErrPermanent = errors.New("outbound: provider profile: permanent error, never retried")
)

// profileTransport wraps base in the provider Transport of the client's
// profile, keyed by the request's host as the profile normalizes it.
func profileTransport(rt *provider.Runtime, base http.RoundTripper) http.RoundTripper {
	return &provider.Transport{Runtime: rt, Base: base}
}
