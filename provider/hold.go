package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sluicerl/sluice/lease"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

// Leases held around every call (Lease.Hold == HoldCall): GitHub's "at most
// 100 concurrent requests per token". Reserve takes one permit of each,
// waiting for one to free, before it charges the rates; Settle (or Release,
// for a call never made) frees them. The permits are lease.Leases over the
// store the fleet shares, each with a holder of its own (one per call) and
// a fencing token, renewed while the call runs; a process that dies holding
// one frees it when its TTL ends.

// leaseStore picks the store of the per-call leases: ls, else the rate
// store when it keeps leases, else the leases it can keep (its
// capability, store.LeaseKeeper), else a new in-memory one.
func leaseStore(ls store.LeaseStore, rates store.RateStore, cfg *Config) store.LeaseStore {
	if ls != nil {
		return ls
	}
	if s, ok := rates.(store.LeaseStore); ok {
		return s
	}
	if k, ok := rates.(store.LeaseKeeper); ok {
		return k.KeepLeases()
	}
	return memstore.NewLeases(memstore.LeasesConfig{Clock: cfg.Clock})
}

// leaseParams returns the acquire parameters of the per-call lease l for
// the call: its key normalized by the lease's scope, as the limits' are.
func (rt *Runtime) leaseParams(c *Call, l *Lease) (lease.Params, error) {
	k, err := rt.scopeKey(c, l.Scope)
	if err != nil {
		return lease.Params{}, err
	}
	return lease.Params{Name: rt.p.Name + "." + l.Name, Key: rt.prefix + k, Permits: l.Permits, TTL: l.TTL}, nil
}

// busy says which per-call lease had no free permit.
type busy struct {
	name  string
	delay time.Duration
}

// hold takes one permit of each per-call lease for the call. wait < 0
// waits until ctx ends; wait >= 0 waits at most that long (rt's clock) and
// then answers busy. Nothing is held when it returns an error or busy.
func (rt *Runtime) hold(ctx context.Context, c *Call, wait time.Duration) (held []*lease.Lease, b *busy, err error) {
	if len(rt.callLeases) == 0 {
		return nil, nil, nil
	}
	defer func() {
		if err != nil || b != nil {
			_ = releaseLeases(ctx, held)
			held = nil
		}
	}()
	for i := range rt.callLeases {
		l := &rt.callLeases[i]
		p, err := rt.leaseParams(c, l)
		if err != nil {
			return held, nil, err
		}
		ls, res, err := rt.leaser.Acquire(ctx, p)
		if err == nil && ls == nil && wait != 0 {
			ls, err = rt.acquireWait(ctx, p, wait)
		}
		if err != nil {
			if ctx.Err() != nil {
				return held, nil, ctx.Err()
			}
			return held, nil, fmt.Errorf("provider %s: lease %s: %w", rt.p.Name, l.Name, err)
		}
		if ls == nil {
			return held, &busy{name: l.Name, delay: res.RetryAfter}, nil
		}
		held = append(held, ls)
	}
	return held, nil, nil
}

// acquireWait waits for a permit: until ctx ends when wait < 0, else at
// most wait on rt's clock (then a nil Lease and no error).
func (rt *Runtime) acquireWait(ctx context.Context, p lease.Params, wait time.Duration) (*lease.Lease, error) {
	if wait < 0 {
		return rt.leaser.AcquireWait(ctx, p)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tm := rt.clk.NewTimer(wait)
	defer tm.Stop()
	go func() {
		select {
		case <-tm.C():
			cancel()
		case <-wctx.Done():
		}
	}()
	ls, err := rt.leaser.AcquireWait(wctx, p)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.Canceled) {
		return nil, nil // waited as long as allowed
	}
	return ls, err
}

// releaseLeases frees held permits, even after ctx ended. A permit that
// cannot be freed (the store failed, or the lease was lost) frees when its
// TTL ends.
func releaseLeases(ctx context.Context, held []*lease.Lease) error {
	var errs []error
	for _, ls := range held {
		if err := ls.Release(context.WithoutCancel(ctx)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// takeLeases hands the ticket's per-call permits to the caller, who must
// release them; later calls get none.
func (t *Ticket) takeLeases() []*lease.Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	held := t.leases
	t.leases = nil
	return held
}

// Release frees the permits an OK ticket holds of the profile's per-call
// leases (Lease.Hold HoldCall), without settling it: for a call that was
// never made (outbound's Permit.Cancel). Settle frees them itself. Only
// the first Release or Settle frees anything; later calls return nil. An
// error (the store failed, or a permit was lost) means a permit frees when
// its TTL ends instead.
func (rt *Runtime) Release(ctx context.Context, t *Ticket) error {
	if t == nil {
		return nil
	}
	return releaseLeases(ctx, t.takeLeases())
}
