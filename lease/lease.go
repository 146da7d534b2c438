package lease

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
)

var (
	// ErrLost is the cause of a Lease's Context when the lease was lost:
	// a renewal found it no longer held, or no renewal succeeded before it
	// would have expired.
	ErrLost = errors.New("lease: lost")
	// ErrReleased is the cause of a Lease's Context after Release.
	ErrReleased = errors.New("lease: released")
	// ErrInvalidConfig is wrapped by New for a bad Config.
	ErrInvalidConfig = errors.New("lease: invalid config")
)

// Config configures a Leaser. The zero value is ready to use.
type Config struct {
	// Store keeps the leases. Nil means a new in-memory store.
	Store store.LeaseStore
	// Clock times renewals and back-off. Nil means the real clock. The
	// store's clock decides when a lease ends.
	Clock clock.Clock
	// RenewFraction is the fraction of the TTL after which a held lease is
	// renewed, in (0, 0.9]. Zero means 1/3: two renewals may fail before
	// the lease ends.
	RenewFraction float64
	// MinBackoff and MaxBackoff bound AcquireWait's jittered back-off
	// between attempts when the store cannot announce releases (and as a
	// safety net when it can). Zero means 10ms and 1s.
	MinBackoff, MaxBackoff time.Duration
}

// Leaser acquires leases. It is safe for concurrent use. Build it with New;
// the zero value is not usable.
type Leaser struct {
	store    store.LeaseStore
	watcher  store.LeaseWatcher // nil if the store announces nothing
	clk      clock.Clock
	fraction float64
	minB     time.Duration
	maxB     time.Duration
}

// New returns a Leaser.
func New(cfg Config) (*Leaser, error) {
	l := &Leaser{store: cfg.Store, clk: clock.Or(cfg.Clock), fraction: cfg.RenewFraction, minB: cfg.MinBackoff, maxB: cfg.MaxBackoff}
	if l.store == nil {
		l.store = memstore.NewLeases(memstore.LeasesConfig{Clock: cfg.Clock})
	}
	if !(l.fraction >= 0 && l.fraction <= 0.9) {
		return nil, fmt.Errorf("%w: RenewFraction must be in (0, 0.9], got %v", ErrInvalidConfig, l.fraction)
	}
	if l.fraction == 0 {
		l.fraction = 1.0 / 3
	}
	if l.minB < 0 || l.maxB < 0 {
		return nil, fmt.Errorf("%w: negative back-off", ErrInvalidConfig)
	}
	if l.minB == 0 {
		l.minB = 10 * time.Millisecond
	}
	if l.maxB == 0 {
		l.maxB = time.Second
	}
	if l.minB > l.maxB {
		return nil, fmt.Errorf("%w: MinBackoff %s above MaxBackoff %s", ErrInvalidConfig, l.minB, l.maxB)
	}
	l.watcher, _ = l.store.(store.LeaseWatcher)
	return l, nil
}

// Store returns the store the Leaser works on.
func (l *Leaser) Store() store.LeaseStore { return l.store }

// Params describes the lease to acquire.
type Params struct {
	Name    string
	Key     string
	Permits int64
	TTL     time.Duration
	// Holder identifies the holder. Empty means a new random id per
	// acquire. A holder that already holds a permit of the key gets that
	// permit back, renewed, with the same token: two Leases acquired with
	// one Holder are one permit, and releasing either frees it (the other
	// then finds itself lost).
	Holder string
}

func (p *Params) storeParams() (store.AcquireParams, error) {
	h := p.Holder
	if h == "" {
		var b [12]byte
		_, _ = crand.Read(b[:])
		h = hex.EncodeToString(b[:])
	}
	sp := store.AcquireParams{Name: p.Name, Key: p.Key, Holder: h, Permits: p.Permits, TTL: p.TTL}
	return sp, sp.Check()
}

// Acquire takes a permit if one is free, without waiting. When none is,
// it returns a nil Lease and the store's answer (RetryAfter says when a
// permit frees at the latest). ctx bounds the call only: the Lease renews
// itself until released or lost, and its Context carries ctx's values but
// not its deadline.
func (l *Leaser) Acquire(ctx context.Context, p Params) (*Lease, store.AcquireResult, error) {
	sp, err := p.storeParams()
	if err != nil {
		return nil, store.AcquireResult{}, err
	}
	return l.acquire(ctx, &sp)
}

func (l *Leaser) acquire(ctx context.Context, sp *store.AcquireParams) (*Lease, store.AcquireResult, error) {
	sent := l.clk.Now()
	res, err := l.store.Acquire(ctx, *sp)
	if err != nil || !res.Acquired {
		return nil, res, err
	}
	return l.hold(context.WithoutCancel(ctx), res.Lease, sp.TTL, sent, res.At), res, nil
}

// AcquireWait takes a permit, waiting until one frees or ctx ends (then it
// returns ctx's error). As for Acquire, ctx bounds the wait, not the
// Lease. It never polls the store in a tight loop: it retries when
// the store announces a release of the key (store.LeaseWatcher), and
// otherwise after a jittered back-off that grows from MinBackoff to
// MaxBackoff and never outlasts the first holder's expiry.
func (l *Leaser) AcquireWait(ctx context.Context, p Params) (*Lease, error) {
	sp, err := p.storeParams()
	if err != nil {
		return nil, err
	}
	var wake <-chan struct{}
	if l.watcher != nil {
		ch, stop, err := l.watcher.WatchLease(ctx, sp.Name, sp.Key)
		if err == nil {
			defer stop()
			wake = ch
		}
	}
	backoff := l.minB
	for {
		ls, res, err := l.acquire(ctx, &sp)
		if err != nil || ls != nil {
			return ls, err
		}
		d := backoff
		if wake != nil {
			d = l.maxB // a release wakes us; this is the safety net
		}
		d = jitter(min(d, max(res.RetryAfter, time.Millisecond)))
		backoff = min(2*backoff, l.maxB)
		t := l.clk.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-wake:
			t.Stop()
		case <-t.C():
		}
	}
}

// jitter returns a duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Lease is a held permit. It renews itself until released or lost, and its
// Context ends the moment it is lost. It is safe for concurrent use.
type Lease struct {
	l      *Leaser
	sl     store.Lease
	ttl    time.Duration
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the keep-alive has stopped

	// halted ends when Release is called: it stops the keep-alive and
	// cancels a renewal in flight, so Release never waits for one.
	halted context.Context
	halt   context.CancelFunc

	mu       sync.Mutex
	expires  int64     // store clock, from the last renewal
	deadline time.Time // local clock: when the lease may have ended
}

// hold starts keeping sl alive. parent carries values only: it never ends.
func (l *Leaser) hold(parent context.Context, sl store.Lease, ttl time.Duration, sent time.Time, at int64) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	halted, halt := context.WithCancel(context.Background())
	ls := &Lease{
		l: l, sl: sl, ttl: ttl, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), halted: halted, halt: halt,
		expires: sl.Expires,
		// The lease runs TTL from the store's decision, which came after
		// the request was sent: counting from the send is safe.
		deadline: sent.Add(time.Duration(sl.Expires-at) * time.Microsecond),
	}
	go ls.keepAlive()
	return ls
}

// Token returns the fencing token.
func (ls *Lease) Token() int64 { return ls.sl.Token }

// Holder returns the holder id.
func (ls *Lease) Holder() string { return ls.sl.Holder }

// Lease returns the store's view of the lease as of its last renewal.
func (ls *Lease) Lease() store.Lease {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	out := ls.sl
	out.Expires = ls.expires
	return out
}

// Context returns a context that ends when the lease is lost (cause
// ErrLost) or released (ErrReleased). Work done under the lease should run
// under it; writes should still be fenced.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Err returns why the lease's Context ended, or nil while it is held.
func (ls *Lease) Err() error { return context.Cause(ls.ctx) }

// Write applies a fenced write of value to field: store.ErrStaleToken if
// the lease is no longer held or a newer token wrote field.
func (ls *Lease) Write(ctx context.Context, field string, value []byte) error {
	return ls.l.store.FencedWrite(ctx, store.FencedWriteParams{Name: ls.sl.Name, Key: ls.sl.Key, Token: ls.sl.Token, Field: field, Value: value})
}

// Release stops renewing (cancelling a renewal in flight), ends the
// lease's Context (cause ErrReleased, unless it was lost before) and frees
// the permit. It returns store.ErrLeaseNotHeld if the lease was lost
// meanwhile (nothing is freed then: a successor's permit is never
// touched). If the store fails, the Context has ended all the same (nothing
// renews the lease any more) and the permit frees when its TTL runs out;
// calling Release again retries the release.
func (ls *Lease) Release(ctx context.Context) error {
	ls.halt()
	<-ls.done
	ls.cancel(ErrReleased)
	return ls.l.store.Release(ctx, store.ReleaseParams{Name: ls.sl.Name, Key: ls.sl.Key, Holder: ls.sl.Holder, Token: ls.sl.Token})
}

// keepAlive renews every fraction of the TTL until stopped, and cancels
// the lease's Context when it is lost: a renewal finds it not held, or the
// local deadline passes with no renewal through.
func (ls *Lease) keepAlive() {
	defer close(ls.done)
	every := time.Duration(float64(ls.ttl) * ls.l.fraction)
	retry := max(every/4, time.Millisecond)
	next := every
	for {
		ls.mu.Lock()
		untilDeadline := ls.deadline.Sub(ls.l.clk.Now())
		ls.mu.Unlock()
		if untilDeadline <= 0 {
			ls.cancel(ErrLost)
			return
		}
		t := ls.l.clk.NewTimer(min(next, untilDeadline))
		select {
		case <-ls.halted.Done():
			t.Stop()
			return
		case <-t.C():
		}
		ls.mu.Lock()
		lost := !ls.l.clk.Now().Before(ls.deadline)
		ls.mu.Unlock()
		if lost {
			ls.cancel(ErrLost)
			return
		}
		sent := ls.l.clk.Now()
		// Past the deadline a renewal could not help: the lease may be
		// gone. (The local deadline bounds the call, whatever the clock.)
		// Release cancels it too.
		rctx, cancel := context.WithTimeout(ls.ctx, ls.deadline.Sub(sent))
		unhook := context.AfterFunc(ls.halted, cancel)
		got, err := ls.l.store.Renew(rctx, store.RenewParams{Name: ls.sl.Name, Key: ls.sl.Key, Holder: ls.sl.Holder, Token: ls.sl.Token, TTL: ls.ttl})
		unhook()
		cancel()
		switch {
		case ls.halted.Err() != nil:
			return // released meanwhile: Release decides what the holder is told
		case errors.Is(err, store.ErrLeaseNotHeld):
			ls.cancel(ErrLost)
			return
		case err != nil:
			next = retry // transient: try again soon, until the deadline
		default:
			ls.mu.Lock()
			ls.expires = got.Expires
			ls.deadline = sent.Add(ls.ttl)
			ls.mu.Unlock()
			next = every
		}
	}
}
