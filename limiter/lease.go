package limiter

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var (
	// ErrNotRatePolicy: a rate operation (Allow, Reserve, Wait) on a
	// concurrency policy.
	ErrNotRatePolicy = errors.New("limiter: concurrency policy: acquire a lease instead")
	// ErrNotLeasePolicy: a lease operation on a rate policy.
	ErrNotLeasePolicy = errors.New("limiter: not a concurrency policy")
	// ErrShadowInMixed: a shadow policy in a request with a lease, which
	// cannot evaluate a policy without charging it.
	ErrShadowInMixed = errors.New("limiter: a shadow policy cannot be mixed with a lease")
)

func (p *Policy) validateConcurrency() error {
	switch {
	case p.Rate != 0 || p.Period != 0 || p.Burst != 0:
		return fmt.Errorf("%w %q: concurrency takes permits and ttl, not rate, period or burst", ErrInvalidPolicy, p.Name)
	case p.Shadow:
		return fmt.Errorf("%w %q: concurrency cannot be shadow", ErrInvalidPolicy, p.Name)
	case p.Outage != store.Outage{}:
		return fmt.Errorf("%w %q: on_store_outage applies only to rate policies", ErrInvalidPolicy, p.Name)
	case p.Permits < 1 || p.Permits > store.MaxPermits:
		return fmt.Errorf("%w %q: permits must be in [1, %d], got %d", ErrInvalidPolicy, p.Name, store.MaxPermits, p.Permits)
	}
	if err := store.CheckTTL(p.TTL); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidPolicy, p.Name, err)
	}
	return nil
}

// ErrLeaseStoreMismatch is returned by New when Config.Leases keeps rates
// of its own (a store.RateLeaseStore) other than Config.Store: mixed
// requests would charge their rate items where Allow never looks.
var ErrLeaseStoreMismatch = errors.New("limiter: Leases keeps rates apart from Store")

// setLeases picks the lease store (see Config.Leases). It looks for the
// stores' capabilities (store.RateSharer, store.LeaseKeeper), never for a
// backend's type.
func (l *Limiter) setLeases(ls store.LeaseStore) error {
	if ls != nil {
		// A mismatch we can see: both say whose rates they charge, and
		// they differ. (A wrapped Store, such as store/guard's, says
		// nothing and is not checked.)
		if a, ok := ls.(store.RateSharer); ok {
			if b, ok := l.store.(store.RateSharer); ok && a.Rates() != b.Rates() {
				return fmt.Errorf("%w: Leases (%T) charges rates on another store than Store (%T)", ErrLeaseStoreMismatch, ls, l.store)
			}
		}
	}
	if ls == nil {
		if s, ok := l.store.(store.LeaseStore); ok {
			ls = s
		} else if k, ok := l.store.(store.LeaseKeeper); ok {
			ls = k.KeepLeases()
		} else {
			ls = memstore.NewLeases(memstore.LeasesConfig{}) // the embedded default
		}
	}
	l.leases = ls
	l.mixed, _ = ls.(store.RateLeaseStore)
	return nil
}

// Leases returns the store that keeps the leases of concurrency policies.
func (l *Limiter) Leases() store.LeaseStore { return l.leases }

func (l *Limiter) leasePolicy(policy string) (*Policy, error) {
	h, err := l.Handle(policy)
	if err != nil {
		return nil, err
	}
	if h.policy.Algorithm != store.Concurrency {
		return nil, fmt.Errorf("%w: %q is %s", ErrNotLeasePolicy, policy, h.policy.Algorithm)
	}
	return &h.policy, nil
}

// LeaseParams returns the store's acquire parameters for holder on key
// under a concurrency policy: the policy's permits and TTL.
func (l *Limiter) LeaseParams(policy, key, holder string) (store.AcquireParams, error) {
	p, err := l.leasePolicy(policy)
	if err != nil {
		return store.AcquireParams{}, err
	}
	if err := checkLease(key, holder); err != nil {
		return store.AcquireParams{}, err
	}
	return store.AcquireParams{Name: p.Name, Key: key, Holder: holder, Permits: p.Permits, TTL: p.TTL}, nil
}

// checkLease checks a lease's key and holder by the identifier rule before
// any store sees them.
func checkLease(key, holder string) error {
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("limiter: lease: %w", err)
	}
	if err := store.CheckHolder(holder); err != nil {
		return fmt.Errorf("limiter: lease: %w", err)
	}
	return nil
}

// LeaseFor returns the lease.Params of key under a concurrency policy (its
// name, permits and TTL; no holder: the Leaser makes one up). It is the one
// way a Go program holds a policy's lease: a lease.Leaser over Leases(),
//
//	leaser, err := lease.New(lease.Config{Store: lim.Leases()})
//	p, err := lim.LeaseFor("shopify-bulk", "shop-1")
//	l, err := leaser.AcquireWait(ctx, p) // renewed until l.Release
//
// which waits, renews, and ends l.Context() when the lease is lost.
// Acquire, Renew and Release below are the one-shot store operations the
// HTTP API is built on: they neither wait nor renew.
func (l *Limiter) LeaseFor(policy, key string) (lease.Params, error) {
	p, err := l.leasePolicy(policy)
	if err != nil {
		return lease.Params{}, err
	}
	if err := store.CheckKey(key); err != nil {
		return lease.Params{}, fmt.Errorf("limiter: lease: %w", err)
	}
	return lease.Params{Name: p.Name, Key: key, Permits: p.Permits, TTL: p.TTL}, nil
}

// Acquire takes one of a concurrency policy's permits of key for holder,
// without waiting. Not acquiring is a result (res.Acquired false). It is
// the one-shot operation behind POST /v1/leases; programs hold leases
// with a lease.Leaser (see LeaseFor).
func (l *Limiter) Acquire(ctx context.Context, policy, key, holder string) (store.AcquireResult, error) {
	p, err := l.LeaseParams(policy, key, holder)
	if err != nil {
		return store.AcquireResult{}, err
	}
	return l.leases.Acquire(ctx, p)
}

// Renew extends holder's lease of key (with token) by the policy's TTL.
func (l *Limiter) Renew(ctx context.Context, policy, key, holder string, token int64) (store.Lease, error) {
	p, err := l.leasePolicy(policy)
	if err != nil {
		return store.Lease{}, err
	}
	if err := checkLease(key, holder); err != nil {
		return store.Lease{}, err
	}
	return l.leases.Renew(ctx, store.RenewParams{Name: p.Name, Key: key, Holder: holder, Token: token, TTL: p.TTL})
}

// Release frees holder's permit of key (with token).
func (l *Limiter) Release(ctx context.Context, policy, key, holder string, token int64) error {
	if _, err := l.leasePolicy(policy); err != nil {
		return err
	}
	if err := checkLease(key, holder); err != nil {
		return err
	}
	return l.leases.Release(ctx, store.ReleaseParams{Name: policy, Key: key, Holder: holder, Token: token})
}

// Holders lists the live leases of key under a concurrency policy.
func (l *Limiter) Holders(ctx context.Context, policy, key string) ([]store.Lease, error) {
	if _, err := l.leasePolicy(policy); err != nil {
		return nil, err
	}
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("limiter: lease: %w", err)
	}
	return l.leases.Holders(ctx, store.HoldersParams{Name: policy, Key: key})
}

// LeaseRequest is the lease of a mixed all-or-nothing request.
type LeaseRequest struct {
	Policy string // a concurrency policy
	Key    string
	Holder string
}

// MixedDecision is the outcome of AllowAllAcquire: Allowed only if every
// enforced rate policy allowed and the lease was acquired; otherwise no
// rate was charged and no lease is held.
type MixedDecision struct {
	MultiDecision
	Lease store.AcquireResult
}

// AllowAllAcquire takes every rate request and one lease at once, or none
// of them. With a lease store that keeps rates too (store.RateLeaseStore,
// every Sluice backend) it is one atomic store operation. Otherwise the
// lease is acquired first, the rates taken all-or-nothing, and the lease
// released again if they refuse: never a rate charged without the lease,
// though another acquirer may find the permit briefly taken. Shadow
// policies cannot take part (ErrShadowInMixed).
func (l *Limiter) AllowAllAcquire(ctx context.Context, reqs []Request, lr LeaseRequest) (MixedDecision, error) {
	lp, err := l.LeaseParams(lr.Policy, lr.Key, lr.Holder)
	if err != nil {
		return MixedDecision{}, err
	}
	hs := make([]*Handle, len(reqs))
	items := make([]store.Item, len(reqs))
	for i, r := range reqs {
		h, err := l.Handle(r.Policy)
		if err != nil {
			return MixedDecision{}, err
		}
		if h.policy.Algorithm == store.Concurrency {
			return MixedDecision{}, fmt.Errorf("%w: %q in the rate requests", ErrNotRatePolicy, r.Policy)
		}
		if h.policy.Shadow {
			return MixedDecision{}, fmt.Errorf("%w: %q", ErrShadowInMixed, r.Policy)
		}
		if err := store.CheckKey(r.Key); err != nil {
			return MixedDecision{}, fmt.Errorf("limiter: all-or-nothing with lease: request %d: %w", i, err)
		}
		hs[i] = h
		items[i] = store.Item{Key: r.Key, Limit: h.limit, Cost: r.Cost}
	}
	var out MixedDecision
	var rates store.AllResult
	if l.mixed != nil {
		res, err := l.mixed.TakeAllAcquire(ctx, store.TakeAllAcquireParams{Items: items, Lease: lp})
		if err != nil {
			return MixedDecision{}, fmt.Errorf("limiter: all-or-nothing with lease: %w", err)
		}
		out.Lease, rates = res.Lease, res.Rates
	} else {
		res, err := l.leases.Acquire(ctx, lp)
		if err != nil {
			return MixedDecision{}, fmt.Errorf("limiter: all-or-nothing with lease: %w", err)
		}
		out.Lease = res
		peek := items
		if !res.Acquired {
			peek = make([]store.Item, len(items))
			for i, it := range items {
				it.Cost = 0
				peek[i] = it
			}
		}
		rates, err = l.store.TakeAll(ctx, store.TakeAllParams{Items: peek})
		switch {
		case err != nil || !res.Acquired || rates.Allowed:
		case res.Renewed:
			// The holder held this permit before the call: it keeps it.
			out.Lease = store.AcquireResult{Held: res.Held, At: res.At}
		default:
			err = l.leases.Release(context.WithoutCancel(ctx), store.ReleaseParams{Name: lp.Name, Key: lp.Key, Holder: lp.Holder, Token: res.Lease.Token})
			out.Lease = store.AcquireResult{Held: res.Held - 1, At: res.At}
		}
		if err != nil {
			return MixedDecision{}, fmt.Errorf("limiter: all-or-nothing with lease: %w", err)
		}
	}
	if len(rates.Results) != len(items) {
		return MixedDecision{}, fmt.Errorf("limiter: all-or-nothing with lease: %d results for %d items", len(rates.Results), len(items))
	}
	out.MultiDecision = MultiDecision{Allowed: out.Lease.Acquired && rates.Allowed, Decisions: make([]Decision, len(reqs))}
	for i, h := range hs {
		d := decision(&h.policy, &rates.Results[i])
		out.Decisions[i] = d
		if !d.Allowed {
			out.RetryAfter = max(out.RetryAfter, d.RetryAfter)
		}
	}
	if !out.Lease.Acquired {
		out.RetryAfter = max(out.RetryAfter, out.Lease.RetryAfter)
	}
	return out, nil
}
