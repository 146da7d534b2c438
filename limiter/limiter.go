package limiter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var (
	// ErrUnknownPolicy is returned for a policy name the Limiter does not hold.
	ErrUnknownPolicy = errors.New("limiter: unknown policy")
	// ErrWouldExceedDeadline is returned by Wait when the units could not be
	// granted before ctx's deadline; Wait returns it at once, without waiting.
	ErrWouldExceedDeadline = errors.New("limiter: wait would exceed context deadline")
	// ErrCostExceedsLimit is returned for a cost above the policy's burst
	// (GCRA) or limit (windows): it could never be granted.
	ErrCostExceedsLimit = store.ErrCostExceedsLimit
	// ErrInvalidPolicy is wrapped by Policy.Validate.
	ErrInvalidPolicy = errors.New("limiter: invalid policy")
)

// Policy is a named rate limit.
type Policy struct {
	// Name identifies the policy; state is kept per (policy, key).
	Name string
	// Algorithm is store.GCRA (the zero value), store.FixedWindow or
	// store.SlidingWindow.
	Algorithm store.Algorithm
	// Rate is the units admitted per Period: the rate for GCRA, the limit
	// per window for windows.
	Rate int64
	// Period is the GCRA period or the window length.
	Period time.Duration
	// Burst is how many units GCRA lets through at once; 0 means Rate.
	// Windows ignore it and reject a non-zero value.
	Burst int64
	// Shadow evaluates and counts the policy but never denies.
	Shadow bool
	// Outage is what the policy does while a shared store is unavailable
	// (enforced by store/guard; the zero value fails closed).
	Outage store.Outage
	// Description is free text shown by the server.
	Description string
	// Permits and TTL describe a lease policy (Algorithm
	// store.Concurrency): up to Permits holders per key at once, each for
	// TTL unless renewed. Rate policies leave them zero.
	Permits int64
	TTL     time.Duration
}

// Limit returns the store limit the policy enforces.
func (p Policy) Limit() store.Limit {
	return store.Limit{Name: p.Name, Algorithm: p.Algorithm, Rate: p.Rate, Period: p.Period, Burst: p.Burst}
}

// Validate reports whether the policy can be enforced.
func (p Policy) Validate() error {
	if err := validName(p.Name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if p.Algorithm == store.Concurrency {
		return p.validateConcurrency()
	}
	if p.Permits != 0 || p.TTL != 0 {
		return fmt.Errorf("%w %q: permits and ttl apply only to concurrency, not %s", ErrInvalidPolicy, p.Name, p.Algorithm)
	}
	if p.Algorithm != store.GCRA && p.Burst != 0 {
		return fmt.Errorf("%w %q: burst applies only to gcra, not %s", ErrInvalidPolicy, p.Name, p.Algorithm)
	}
	if err := p.Limit().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
	}
	if err := p.Outage.Validate(); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidPolicy, p.Name, err)
	}
	return nil
}

func validName(name string) error {
	if name == "" {
		return errors.New("empty policy name")
	}
	if len(name) > 128 {
		return fmt.Errorf("policy name %.20q... is longer than 128 bytes", name)
	}
	for _, r := range name {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.' || r == ':' || r == '/'
		if !ok {
			return fmt.Errorf("policy name %q: only letters, digits and _ - . : / are allowed", name)
		}
	}
	return nil
}

// Config configures a Limiter. Zero fields take the documented defaults.
type Config struct {
	// Store keeps the rate state. Nil means a new in-memory store.
	Store store.RateStore
	// Clock times Wait's sleeps. Nil means the real clock. The store's own
	// clock decides what is allowed.
	Clock clock.Clock
	// Policies are the limits the Limiter enforces. Names must be unique.
	Policies []Policy
	// Leases keeps the leases of concurrency policies. Nil means Store
	// when it is a store.LeaseStore, else the lease store Store keeps (a
	// store.LeaseKeeper, such as the embedded memstore), else a new
	// in-memory store. When Leases is a
	// store.RateLeaseStore it must be the backend Store decides on: mixed
	// requests (AllowAllAcquire) charge their rate items through it, in
	// one atomic operation; New fails with ErrLeaseStoreMismatch when it
	// can tell it is not.
	Leases store.LeaseStore
}

// Limiter enforces named policies over a store. It is safe for concurrent
// use. Build it with New; the zero value is not usable.
type Limiter struct {
	store    store.RateStore
	clock    clock.Clock
	handles  map[string]*Handle
	policies []Policy
	leases   store.LeaseStore     // lease.go
	mixed    store.RateLeaseStore // lease.go: rates and a lease at once, or nil
}

// New returns a Limiter for cfg.Policies.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{
		store:   cfg.Store,
		clock:   clock.Or(cfg.Clock),
		handles: make(map[string]*Handle, len(cfg.Policies)),
	}
	if l.store == nil {
		l.store = memstore.New(memstore.Config{})
	}
	if err := l.setLeases(cfg.Leases); err != nil {
		return nil, err
	}
	for _, p := range cfg.Policies {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := l.handles[p.Name]; dup {
			return nil, fmt.Errorf("%w: duplicate policy name %q", ErrInvalidPolicy, p.Name)
		}
		h := &Handle{store: l.store, l: l, policy: p, limit: p.Limit()}
		if pt, ok := l.store.(store.PreparedTaker); ok && p.Algorithm != store.Concurrency {
			prep, err := store.Prepare(h.limit)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrInvalidPolicy, err)
			}
			h.fast, h.prepared = pt, prep
		}
		l.handles[p.Name] = h
		l.policies = append(l.policies, p)
	}
	slices.SortFunc(l.policies, func(a, b Policy) int { return cmpString(a.Name, b.Name) })
	return l, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Policies returns the policies, sorted by name.
func (l *Limiter) Policies() []Policy { return slices.Clone(l.policies) }

// Store returns the store the Limiter decides against.
func (l *Limiter) Store() store.RateStore { return l.store }

// Handle returns the handle of the named policy, so that hot paths skip the
// lookup by name. It returns ErrUnknownPolicy for a name it does not hold.
func (l *Limiter) Handle(policy string) (*Handle, error) {
	h, ok := l.handles[policy]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
	}
	return h, nil
}

// Allow reports whether one unit of policy may be used for key now.
func (l *Limiter) Allow(ctx context.Context, policy, key string) (Decision, error) {
	return l.AllowN(ctx, policy, key, 1)
}

// AllowN reports whether cost units of policy may be used for key now, and
// takes them if so. It never blocks on the rate (a shared store is still one
// round trip).
func (l *Limiter) AllowN(ctx context.Context, policy, key string, cost int64) (d Decision, err error) {
	h, ok := l.handles[policy]
	if !ok {
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownPolicy, policy)
	}
	err = h.allowInto(ctx, key, cost, &d)
	return d, err
}

// ReserveN takes cost units of policy for key; see Handle.ReserveN.
func (l *Limiter) ReserveN(ctx context.Context, policy, key string, cost int64, opts *ReserveOpts) (*Reservation, error) {
	h, err := l.Handle(policy)
	if err != nil {
		return nil, err
	}
	return h.ReserveN(ctx, key, cost, opts)
}

// Wait blocks until one unit of policy may be used for key; see Handle.WaitN.
func (l *Limiter) Wait(ctx context.Context, policy, key string) error {
	return l.WaitN(ctx, policy, key, 1)
}

// WaitN blocks until cost units of policy may be used for key; see
// Handle.WaitN.
func (l *Limiter) WaitN(ctx context.Context, policy, key string, cost int64) error {
	h, err := l.Handle(policy)
	if err != nil {
		return err
	}
	return h.WaitN(ctx, key, cost)
}

// Decision is the outcome of a rate decision.
type Decision struct {
	// Policy is the policy that decided.
	Policy string
	// Allowed reports whether the units were granted. A shadow policy
	// always allows.
	Allowed bool
	// Shadowed is true when a shadow policy would have denied.
	Shadowed bool
	// Limit is the most one request may cost (the burst, or the window's
	// limit).
	Limit int64
	// Remaining is how many units could be taken right after this decision.
	Remaining int64
	// RetryAfter is, when denied (or shadowed), how long until the request
	// would be allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the key is back to its full budget.
	ResetAfter time.Duration
	// Fallback is set when the shared store did not decide (see
	// store/guard): FallbackMode, the policy's outage mode, did, or (for
	// store.FallbackTimeout) the call was denied because the store did not
	// answer in time. A client should not read such a denial as the limit
	// being spent.
	Fallback     store.FallbackReason
	FallbackMode store.OutageMode
}

func decision(p *Policy, r *store.Result) Decision {
	var d Decision
	d.set(p, r)
	return d
}

// set makes d the decision of policy p from the store's result r, field by
// field (the hot path fills a caller's Decision in place).
func (d *Decision) set(p *Policy, r *store.Result) {
	d.Policy = p.Name
	d.Allowed, d.Shadowed = r.Allowed, false
	d.Limit = r.Limit
	d.Remaining = r.Remaining
	d.RetryAfter = r.RetryAfter
	d.ResetAfter = r.ResetAfter
	d.Fallback, d.FallbackMode = r.Fallback, r.FallbackMode
	if !r.Allowed && p.Shadow {
		d.Allowed, d.Shadowed = true, true
	}
}

// Handle decides against one policy. It is safe for concurrent use and
// stays valid as long as its Limiter.
type Handle struct {
	store  store.RateStore // the Limiter's, copied here for the hot path
	l      *Limiter
	policy Policy
	limit  store.Limit
	// fast and prepared are the copy-free path when the store has the
	// store.PreparedTaker capability (the embedded memstore does): a
	// decision on a limit validated once.
	fast     store.PreparedTaker
	prepared *store.Prepared
}

// Policy returns the handle's policy.
func (h *Handle) Policy() Policy { return h.policy }

// Allow is AllowN with a cost of 1.
func (h *Handle) Allow(ctx context.Context, key string) (Decision, error) {
	return h.AllowN(ctx, key, 1)
}

// AllowN reports whether cost units may be used for key now, and takes them
// if so. A cost of 0 peeks without taking anything.
func (h *Handle) AllowN(ctx context.Context, key string, cost int64) (d Decision, err error) {
	err = h.allowInto(ctx, key, cost, &d)
	return d, err
}

// allowInto decides into *d: through the store's copy-free path when it
// has one (store.PreparedTaker), otherwise through the store interface.
func (h *Handle) allowInto(ctx context.Context, key string, cost int64, d *Decision) error {
	var r store.Result
	var err error
	if h.fast != nil {
		r, err = h.fast.DecidePrepared(key, h.prepared, cost)
	} else if h.policy.Algorithm == store.Concurrency {
		err = ErrNotRatePolicy
	} else if err = store.CheckKey(key); err == nil {
		// The key is checked before any store sees it: a store outage
		// policy must never answer for a bad key.
		r, err = h.store.Take(ctx, store.TakeParams{Key: key, Limit: h.limit, Cost: cost})
	}
	if err != nil {
		if h.policy.Shadow && errors.Is(err, store.ErrCostExceedsLimit) {
			// A policy on trial must not break traffic: a cost it could
			// never grant is a shadowed denial, not an error.
			*d = Decision{Policy: h.policy.Name, Allowed: true, Shadowed: true, Limit: h.limit.Max()}
			return nil
		}
		*d = Decision{}
		return fmt.Errorf("limiter: policy %q: %w", h.policy.Name, err)
	}
	d.set(&h.policy, &r)
	return nil
}

// ReserveOpts are options for ReserveN. A nil *ReserveOpts takes the
// defaults.
type ReserveOpts struct {
	// MaxDelay bounds how far ahead a GCRA reservation may be booked. Zero
	// means no bound. Window policies can only reserve what is available
	// now.
	MaxDelay time.Duration
}

// Reservation is units taken ahead of use. Settle or Cancel it at most once;
// a reservation left alone stays charged at its reserved cost. It is safe
// for concurrent use, though settling twice is an error.
type Reservation struct {
	// OK reports whether the units were reserved. When false, nothing was
	// charged and Decision.RetryAfter says when to try again.
	OK bool
	// Delay is how long the holder must wait before using the units.
	Delay time.Duration
	// Decision is the decision that made the reservation.
	Decision Decision

	h       *Handle
	key     string
	cost    int64
	at      int64
	charged bool // false for a shadow policy's would-be denial
	settled atomic.Bool
}

// ErrSettled is returned when a reservation is settled or cancelled twice.
var ErrSettled = errors.New("limiter: reservation already settled")

// ReserveN takes cost units for key now, possibly ahead of when they
// conform: the Reservation says how long to wait before using them. Use it
// when the real cost is known only afterwards (a GraphQL query's actual cost)
// and Settle with the actual cost, or Cancel to give the units back.
//
// A shadow policy never refuses a reservation nor delays it: it takes the
// units only if they conform now, and otherwise reports Decision.Shadowed
// and takes nothing (settling such a reservation does nothing).
func (h *Handle) ReserveN(ctx context.Context, key string, cost int64, opts *ReserveOpts) (*Reservation, error) {
	maxDelay := time.Duration(math.MaxInt64)
	if opts != nil && opts.MaxDelay > 0 {
		maxDelay = opts.MaxDelay
	}
	if h.policy.Shadow {
		maxDelay = 0 // never book ahead: nobody waits for a shadow policy
	}
	if h.policy.Algorithm == store.Concurrency {
		return nil, fmt.Errorf("limiter: policy %q: %w", h.policy.Name, ErrNotRatePolicy)
	}
	if err := store.CheckKey(key); err != nil {
		return nil, fmt.Errorf("limiter: policy %q: %w", h.policy.Name, err)
	}
	r, err := h.l.store.Take(ctx, store.TakeParams{Key: key, Limit: h.limit, Cost: cost, MaxDelay: maxDelay})
	if err != nil {
		return nil, fmt.Errorf("limiter: policy %q: %w", h.policy.Name, err)
	}
	d := decision(&h.policy, &r)
	res := &Reservation{
		OK:       d.Allowed, // a shadow policy never refuses
		Delay:    r.Delay,
		Decision: d,
		h:        h,
		key:      key,
		cost:     cost,
		at:       r.At,
		charged:  r.Allowed,
	}
	res.settled.Store(!d.Allowed) // a refused reservation has nothing to settle
	return res, nil
}

// Settle corrects the reservation to its actual cost: the difference is
// refunded (actual < reserved) or charged (actual > reserved) atomically in
// the store. It returns ErrSettled if the reservation was already settled or
// cancelled, or was never OK.
func (r *Reservation) Settle(ctx context.Context, actual int64) error {
	if actual < 0 {
		return fmt.Errorf("limiter: settle: negative actual cost %d", actual)
	}
	if !r.settled.CompareAndSwap(false, true) {
		return ErrSettled
	}
	if !r.charged {
		return nil // a shadow policy's would-be denial took nothing
	}
	_, err := r.h.l.store.Settle(ctx, store.SettleParams{
		Key: r.key, Limit: r.h.limit, Reserved: r.cost, Actual: actual, ReservedAt: r.at,
	})
	if err != nil {
		r.settled.Store(false) // nothing changed: the caller may try again
		return fmt.Errorf("limiter: policy %q: settle: %w", r.h.policy.Name, err)
	}
	return nil
}

// Cancel gives the reserved units back; it is Settle with an actual cost of 0.
func (r *Reservation) Cancel(ctx context.Context) error { return r.Settle(ctx, 0) }

// Wait is WaitN with a cost of 1.
func (h *Handle) Wait(ctx context.Context, key string) error { return h.WaitN(ctx, key, 1) }

// WaitN blocks until cost units may be used for key, or ctx is done. When
// ctx has a deadline that the wait would outlast, it returns
// ErrWouldExceedDeadline at once instead of waiting. A shadow policy never
// waits.
//
// For GCRA policies WaitN books its place with one store call and sleeps
// until it comes (first come, first served across every process sharing the
// store); if ctx ends during the sleep the units are given back. Window
// policies retry when the store says the window has room.
func (h *Handle) WaitN(ctx context.Context, key string, cost int64) error {
	if h.policy.Algorithm == store.Concurrency {
		return fmt.Errorf("limiter: policy %q: %w", h.policy.Name, ErrNotRatePolicy)
	}
	if err := store.CheckKey(key); err != nil {
		return fmt.Errorf("limiter: policy %q: %w", h.policy.Name, err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		maxDelay := time.Duration(math.MaxInt64)
		if dl, ok := ctx.Deadline(); ok {
			maxDelay = max(dl.Sub(h.l.clock.Now()), 0)
		}
		if h.policy.Shadow {
			// Decide as AllowN does: booking ahead for a caller that never
			// waits would run the key into unbounded debt.
			maxDelay = 0
		}
		r, err := h.l.store.Take(ctx, store.TakeParams{Key: key, Limit: h.limit, Cost: cost, MaxDelay: maxDelay})
		if err != nil {
			return fmt.Errorf("limiter: policy %q: %w", h.policy.Name, err)
		}
		if h.policy.Shadow {
			return nil
		}
		if r.Allowed {
			if r.Delay <= 0 {
				return nil
			}
			if err := sleep(ctx, h.l.clock, r.Delay); err != nil {
				// Give the booked units back; the caller will not use them.
				_, _ = h.l.store.Settle(context.WithoutCancel(ctx), store.SettleParams{
					Key: key, Limit: h.limit, Reserved: cost, Actual: 0, ReservedAt: r.At,
				})
				return err
			}
			return nil
		}
		if r.RetryAfter > maxDelay {
			return fmt.Errorf("%w: policy %q needs %s", ErrWouldExceedDeadline, h.policy.Name, r.RetryAfter)
		}
		if err := sleep(ctx, h.l.clock, r.RetryAfter); err != nil {
			return err
		}
	}
}

func sleep(ctx context.Context, c clock.Clock, d time.Duration) error {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
