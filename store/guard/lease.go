package guard

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluicerl/sluice/store"
)

// Leases returns the primary store's lease operations behind the guard: each
// call gets the guard's timeout and shares its health state, so a dead store
// costs a lease call at most one timeout and, during the backoff that
// follows, fails at once. Leases fail closed: no outage mode grants a
// permit, so while the store cannot answer every lease operation fails with
// an error wrapping ErrUnavailable (a holder whose renewals fail this way
// loses its lease when its TTL ends, and the lease package's keep-alive says
// so). A timed-out Acquire may still have been granted by the store; that
// permit frees when its TTL ends.
//
// The result implements store.RateLeaseStore and store.LeaseWatcher when the
// primary does; its rate half is this guard, so rate items keep their outage
// modes, and a request that mixes rate items and a lease (TakeAllAcquire)
// fails closed as a whole. Leases returns nil when the primary keeps no
// leases.
func (s *Store) Leases() store.LeaseStore {
	ls, ok := s.primary.(store.LeaseStore)
	if !ok {
		return nil
	}
	b := baseLeases{g: s, ls: ls}
	rl, mixed := s.primary.(store.RateLeaseStore)
	w, watches := s.primary.(store.LeaseWatcher)
	if mixed && watches {
		return &Leases{baseLeases: b, rl: rl, w: w}
	}
	return &b
}

// baseLeases guards a store.LeaseStore.
type baseLeases struct {
	g  *Store
	ls store.LeaseStore
}

// Leases is the guarded lease half of a backend that keeps rates and leases
// together and announces releases (every built-in backend). It is safe for
// concurrent use; get one from Store.Leases.
type Leases struct {
	baseLeases
	rl store.RateLeaseStore
	w  store.LeaseWatcher
}

var (
	_ store.LeaseStore     = (*baseLeases)(nil)
	_ store.RateLeaseStore = (*Leases)(nil)
	_ store.LeaseWatcher   = (*Leases)(nil)
)

// leaseCall runs f through the guard; an unavailable store is an error
// wrapping ErrUnavailable.
func leaseCall[T any](b *baseLeases, ctx context.Context, f func(ctx context.Context) (T, error)) (T, error) {
	r, v := call(b.g, ctx, f)
	if v.ok {
		return r, v.err
	}
	var zero T
	if v.err == nil {
		return zero, fmt.Errorf("%w: waiting %s before trying it again", ErrUnavailable, b.g.retryIn())
	}
	return zero, fmt.Errorf("%w: %w", ErrUnavailable, v.err)
}

// Acquire implements store.LeaseStore.
func (b *baseLeases) Acquire(ctx context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	return leaseCall(b, ctx, func(ctx context.Context) (store.AcquireResult, error) { return b.ls.Acquire(ctx, p) })
}

// Renew implements store.LeaseStore.
func (b *baseLeases) Renew(ctx context.Context, p store.RenewParams) (store.Lease, error) {
	return leaseCall(b, ctx, func(ctx context.Context) (store.Lease, error) { return b.ls.Renew(ctx, p) })
}

// Release implements store.LeaseStore.
func (b *baseLeases) Release(ctx context.Context, p store.ReleaseParams) error {
	_, err := leaseCall(b, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.ls.Release(ctx, p) })
	return err
}

// Holders implements store.LeaseStore.
func (b *baseLeases) Holders(ctx context.Context, p store.HoldersParams) ([]store.Lease, error) {
	return leaseCall(b, ctx, func(ctx context.Context) ([]store.Lease, error) { return b.ls.Holders(ctx, p) })
}

// FencedWrite implements store.LeaseStore.
func (b *baseLeases) FencedWrite(ctx context.Context, p store.FencedWriteParams) error {
	_, err := leaseCall(b, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, b.ls.FencedWrite(ctx, p) })
	return err
}

// FencedRead implements store.LeaseStore.
func (b *baseLeases) FencedRead(ctx context.Context, p store.FencedReadParams) (store.FencedValue, bool, error) {
	type read struct {
		v     store.FencedValue
		found bool
	}
	r, err := leaseCall(b, ctx, func(ctx context.Context) (read, error) {
		v, found, err := b.ls.FencedRead(ctx, p)
		return read{v, found}, err
	})
	return r.v, r.found, err
}

// Take implements store.RateStore through the guard (outage modes apply).
func (l *Leases) Take(ctx context.Context, p store.TakeParams) (store.Result, error) {
	return l.g.Take(ctx, p)
}

// TakeAll implements store.RateStore through the guard.
func (l *Leases) TakeAll(ctx context.Context, p store.TakeAllParams) (store.AllResult, error) {
	return l.g.TakeAll(ctx, p)
}

// Settle implements store.RateStore through the guard.
func (l *Leases) Settle(ctx context.Context, p store.SettleParams) (store.Result, error) {
	return l.g.Settle(ctx, p)
}

// Sync implements store.RateStore through the guard.
func (l *Leases) Sync(ctx context.Context, p store.SyncParams) (store.Result, error) {
	return l.g.Sync(ctx, p)
}

// Reset implements store.RateStore through the guard.
func (l *Leases) Reset(ctx context.Context, p store.ResetParams) error {
	return l.g.Reset(ctx, p)
}

// TakeAllAcquire implements store.RateLeaseStore. It fails closed as a
// whole while the store cannot answer: nothing is charged locally and no
// lease is granted.
func (l *Leases) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (store.TakeAllAcquireResult, error) {
	return leaseCall(&l.baseLeases, ctx, func(ctx context.Context) (store.TakeAllAcquireResult, error) {
		return l.rl.TakeAllAcquire(ctx, p)
	})
}

// WatchLease implements store.LeaseWatcher. Setting up the watch is bounded
// by the guard's deadline; the watch itself lives until stop.
func (l *Leases) WatchLease(ctx context.Context, name, key string) (ch <-chan struct{}, stop func(), err error) {
	if !l.g.usable() {
		return nil, nil, fmt.Errorf("%w: waiting %s before trying it again", ErrUnavailable, l.g.retryIn())
	}
	cctx, cancel := context.WithTimeout(ctx, l.g.dl.get())
	defer cancel()
	ch, stop, err = l.w.WatchLease(cctx, name, key)
	switch {
	case err == nil || requestError(err):
		l.g.settle(answered, nil)
	case ctx.Err() != nil:
		l.g.settle(cancelled, nil)
	case cctx.Err() != nil || timeoutError(err):
		l.g.settle(timedOut, err)
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	default:
		l.g.settle(broken, err)
		err = fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return ch, stop, err
}

// leaseAnswer reports whether err is a lease store's answer about the
// request (not held, stale, invalid), which says the store is up.
func leaseAnswer(err error) bool {
	return errors.Is(err, store.ErrLeaseNotHeld) || errors.Is(err, store.ErrStaleToken) ||
		errors.Is(err, store.ErrInvalidLease)
}
