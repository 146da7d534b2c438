package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Leases
//
// A lease is one of N permits of a (name, key), held by a holder for a TTL
// on the store clock. Every successful acquire returns a fencing token that
// strictly increases per (name, key) across every holder, process and
// restart of a durable store; a write guarded by a token (FencedWrite, or a
// backend's helper for the user's own SQL) is applied only while that token
// still holds its permit and no greater token has written the same field,
// so a holder that lost its lease (frozen past its TTL, partitioned away)
// cannot commit. For a one-permit lease that is exactly "only the newest
// token for the key may write".

var (
	// ErrLeaseNotHeld: a renew or release by a holder that does not hold
	// the permit it names (never held it, released it, or let it expire).
	// A stale holder's release fails with it and frees nothing.
	ErrLeaseNotHeld = errors.New("store: lease not held")
	// ErrStaleToken: a fenced write whose token no longer holds its permit,
	// or is older than a token that already wrote the field. Nothing is
	// written.
	ErrStaleToken = errors.New("store: stale fencing token")
	// ErrInvalidLease: lease parameters that can never work; the wrapped
	// message names the field.
	ErrInvalidLease = errors.New("store: invalid lease")
)

// Concurrency is the algorithm of a lease policy (configuration name
// "concurrency"): N permits held for a TTL, not a rate. It is not a rate
// limit: Limit.Validate rejects it, and ParseAlgorithm, which parses rate
// algorithms, does not return it.
const Concurrency Algorithm = 3

// Bounds on lease parameters, the same on every backend.
const (
	// MaxPermits is the most permits one (name, key) may have.
	MaxPermits = 10000
	// MinLeaseTTL and MaxLeaseTTL bound a lease's TTL.
	MinLeaseTTL = time.Millisecond
	MaxLeaseTTL = 366 * 24 * time.Hour
	// MaxHolderLen bounds a holder id, in bytes.
	MaxHolderLen = 256
	// MaxFencedValue bounds a fenced write's value, in bytes.
	MaxFencedValue = 1 << 16
)

// Lease is one held permit.
type Lease struct {
	Name   string
	Key    string
	Holder string
	// Token is the fencing token: greater than every token issued for
	// (Name, Key) before this lease.
	Token int64
	// Expires is when the permit frees unless renewed, on the store clock,
	// in Unix microseconds.
	Expires int64
}

// ExpiresAt returns Expires as a time.
func (l Lease) ExpiresAt() time.Time { return time.UnixMicro(l.Expires) }

// AcquireParams asks for one of Permits permits of (Name, Key) for Holder,
// for TTL.
type AcquireParams struct {
	Name   string
	Key    string
	Holder string
	// Permits is how many holders may hold (Name, Key) at once, >= 1. A
	// key's permits are whatever its acquirers ask for; when they lower
	// it, current holders keep their permits and acquires fail until
	// enough have left.
	Permits int64
	TTL     time.Duration
	// Now overrides the store clock. Tests only.
	Now time.Time
}

// AcquireResult is the outcome of an acquire. Not acquiring is a result,
// not an error.
type AcquireResult struct {
	Acquired bool
	// Lease is the permit held, when Acquired. A holder that already held
	// a permit of the key gets it back, renewed, with its token unchanged.
	Lease Lease
	// Renewed is true when Acquired by a holder that already held a
	// permit of the key before the call (Lease is that permit, renewed).
	Renewed bool
	// Held is how many permits are held after the decision.
	Held int64
	// RetryAfter is, when not acquired, how long until the first current
	// holder's lease ends unless renewed: when a permit frees at the latest
	// if nobody renews.
	RetryAfter time.Duration
	// At is the store clock's time of the decision, Unix microseconds.
	At int64
}

// RenewParams extends Holder's lease of (Name, Key) with token Token to TTL
// from now.
type RenewParams struct {
	Name   string
	Key    string
	Holder string
	Token  int64
	TTL    time.Duration
	Now    time.Time
}

// ReleaseParams gives back Holder's permit of (Name, Key) with token Token.
type ReleaseParams struct {
	Name   string
	Key    string
	Holder string
	Token  int64
	Now    time.Time
}

// HoldersParams asks who holds (Name, Key) now.
type HoldersParams struct {
	Name string
	Key  string
	Now  time.Time
}

// FencedWriteParams writes Value to Field of (Name, Key) if Token still
// holds its permit and no greater token wrote Field before.
type FencedWriteParams struct {
	Name  string
	Key   string
	Token int64
	Field string
	Value []byte
	Now   time.Time
}

// FencedReadParams reads Field of (Name, Key).
type FencedReadParams struct {
	Name  string
	Key   string
	Field string
}

// FencedValue is the last value a fenced write stored, and the token that
// wrote it.
type FencedValue struct {
	Value []byte
	Token int64
}

// LeaseStore keeps leases. Each method is one atomic operation on the store
// clock. Implementations must be safe for concurrent use.
type LeaseStore interface {
	// Acquire takes one permit, or reports when one will free.
	Acquire(ctx context.Context, p AcquireParams) (AcquireResult, error)
	// Renew extends a held lease; ErrLeaseNotHeld if it is not held.
	Renew(ctx context.Context, p RenewParams) (Lease, error)
	// Release frees a held permit; ErrLeaseNotHeld (and nothing freed) if
	// (Holder, Token) does not hold one.
	Release(ctx context.Context, p ReleaseParams) error
	// Holders lists the live leases of a key, by token.
	Holders(ctx context.Context, p HoldersParams) ([]Lease, error)
	// FencedWrite applies a write guarded by a fencing token;
	// ErrStaleToken (and nothing written) if the token is stale.
	FencedWrite(ctx context.Context, p FencedWriteParams) error
	// FencedRead returns the last fenced write of a field; found is false
	// when none was made.
	FencedRead(ctx context.Context, p FencedReadParams) (v FencedValue, found bool, err error)
}

// LeaseWatcher is implemented by lease stores that can announce freed
// permits, so that waiters need not poll: in-process channels in memstore,
// Redis pub/sub, PostgreSQL LISTEN/NOTIFY.
type LeaseWatcher interface {
	// WatchLease returns a channel that receives a value (coalesced, never
	// blocking the store) after a permit of (name, key) is released, from
	// the moment WatchLease returns until stop is called. Spurious wake-ups
	// are allowed. While the store is reachable, no release of a permit that
	// was held when an Acquire of the key was refused is missed (a store may
	// announce only those: nobody can be waiting for the others). A lease
	// that expires is not announced: waiters also wait for RetryAfter.
	WatchLease(ctx context.Context, name, key string) (ch <-chan struct{}, stop func(), err error)
}

// TakeAllAcquireParams asks for every rate item and one lease at once: all
// of them or none.
type TakeAllAcquireParams struct {
	Items []Item
	Lease AcquireParams
	// Now overrides the store clock for the rates and the lease (Lease.Now
	// is ignored). Tests only.
	Now time.Time
}

// TakeAllAcquireResult is the outcome of a TakeAllAcquire. Allowed is true
// only if every rate item was allowed and the lease acquired; otherwise
// nothing was charged and no lease is held.
type TakeAllAcquireResult struct {
	Allowed bool
	Rates   AllResult
	Lease   AcquireResult
}

// RateLeaseStore is a backend that keeps rates and leases together and can
// take rate items and a lease in one atomic operation.
type RateLeaseStore interface {
	RateStore
	LeaseStore
	TakeAllAcquire(ctx context.Context, p TakeAllAcquireParams) (TakeAllAcquireResult, error)
}

// Check validates acquire parameters, in the order every backend checks
// them.
func (p *AcquireParams) Check() error {
	if err := checkLeaseKey(p.Name, p.Key); err != nil {
		return err
	}
	if err := CheckHolder(p.Holder); err != nil {
		return err
	}
	if p.Permits < 1 || p.Permits > MaxPermits {
		return fmt.Errorf("%w: permits must be in [1, %d], got %d", ErrInvalidLease, MaxPermits, p.Permits)
	}
	if err := CheckTTL(p.TTL); err != nil {
		return err
	}
	return CheckNow(p.Now)
}

// Check validates renew parameters.
func (p *RenewParams) Check() error {
	if err := checkLeaseKey(p.Name, p.Key); err != nil {
		return err
	}
	if err := CheckHolder(p.Holder); err != nil {
		return err
	}
	if err := CheckTTL(p.TTL); err != nil {
		return err
	}
	return CheckNow(p.Now)
}

// Check validates release parameters.
func (p *ReleaseParams) Check() error {
	if err := checkLeaseKey(p.Name, p.Key); err != nil {
		return err
	}
	if err := CheckHolder(p.Holder); err != nil {
		return err
	}
	return CheckNow(p.Now)
}

// Check validates fenced write parameters.
func (p *FencedWriteParams) Check() error {
	if err := checkLeaseKey(p.Name, p.Key); err != nil {
		return err
	}
	if p.Field == "" {
		return fmt.Errorf("%w: empty field", ErrInvalidLease)
	}
	if len(p.Value) > MaxFencedValue {
		return fmt.Errorf("%w: value of %d bytes is larger than %d", ErrInvalidLease, len(p.Value), MaxFencedValue)
	}
	return CheckNow(p.Now)
}

func checkLeaseKey(name, key string) error { return CheckLeaseKey(name, key) }

// CheckLeaseKey checks a lease's policy name and key against the
// identifier rule (ident.go).
func CheckLeaseKey(name, key string) error {
	if err := CheckID("name", name); err != nil {
		return err
	}
	return CheckKey(key)
}

// CheckHolder validates a holder id by the identifier rule (ident.go) with
// the MaxHolderLen bound, so that every backend accepts the same holders.
// The error matches both ErrInvalidLease and ErrInvalidID.
func CheckHolder(h string) error {
	return checkIDAs(ErrInvalidLease, "holder", h, MaxHolderLen)
}

// CheckTTL validates a lease TTL: in [MinLeaseTTL, MaxLeaseTTL] and a whole
// number of microseconds.
func CheckTTL(d time.Duration) error {
	if d < MinLeaseTTL || d > MaxLeaseTTL {
		return fmt.Errorf("%w: ttl must be in [%s, %s], got %s", ErrInvalidLease, MinLeaseTTL, MaxLeaseTTL, d)
	}
	if d%time.Microsecond != 0 {
		return fmt.Errorf("%w: ttl %s is not a whole number of microseconds", ErrInvalidLease, d)
	}
	return nil
}

// LeaseState is one (name, key)'s leases in a backend-neutral shape: the
// live holders in token order. Backends that decide in Go (memstore,
// sqlitestore) keep it and run its methods; Redis and PostgreSQL
// reimplement the same rules in Lua and SQL. The zero value holds nothing.
// It is not safe for concurrent use.
type LeaseState struct {
	Holders []Lease
}

// Expire drops the holders whose lease has ended at now.
func (s *LeaseState) Expire(now int64) {
	s.Holders = slices.DeleteFunc(s.Holders, func(l Lease) bool { return l.Expires <= now })
}

// Acquire decides p at now. next is called for a new token only when a new
// permit is granted.
func (s *LeaseState) Acquire(now int64, p *AcquireParams, next func() (int64, error)) (AcquireResult, error) {
	s.Expire(now)
	ttl := p.TTL.Microseconds()
	for i := range s.Holders {
		if s.Holders[i].Holder == p.Holder {
			s.Holders[i].Expires = now + ttl
			return AcquireResult{Acquired: true, Renewed: true, Lease: s.Holders[i], Held: int64(len(s.Holders)), At: now}, nil
		}
	}
	if int64(len(s.Holders)) >= p.Permits {
		first := s.Holders[0].Expires
		for _, h := range s.Holders {
			first = min(first, h.Expires)
		}
		return AcquireResult{Held: int64(len(s.Holders)), RetryAfter: time.Duration(first-now) * time.Microsecond, At: now}, nil
	}
	tok, err := next()
	if err != nil {
		return AcquireResult{}, err
	}
	l := Lease{Name: p.Name, Key: p.Key, Holder: p.Holder, Token: tok, Expires: now + ttl}
	s.Holders = append(s.Holders, l)
	return AcquireResult{Acquired: true, Lease: l, Held: int64(len(s.Holders)), At: now}, nil
}

// find returns the index of the live lease of (holder, token), or -1.
func (s *LeaseState) find(now int64, holder string, token int64) int {
	for i, h := range s.Holders {
		if h.Holder == holder && h.Token == token && h.Expires > now {
			return i
		}
	}
	return -1
}

// Renew extends (p.Holder, p.Token)'s lease to now + p.TTL.
func (s *LeaseState) Renew(now int64, p *RenewParams) (Lease, error) {
	s.Expire(now)
	i := s.find(now, p.Holder, p.Token)
	if i < 0 {
		return Lease{}, ErrLeaseNotHeld
	}
	s.Holders[i].Expires = now + p.TTL.Microseconds()
	return s.Holders[i], nil
}

// Release drops (p.Holder, p.Token)'s lease.
func (s *LeaseState) Release(now int64, p *ReleaseParams) error {
	s.Expire(now)
	i := s.find(now, p.Holder, p.Token)
	if i < 0 {
		return ErrLeaseNotHeld
	}
	s.Holders = slices.Delete(s.Holders, i, i+1)
	return nil
}

// Live returns a copy of the live holders at now, by token.
func (s *LeaseState) Live(now int64) []Lease {
	out := make([]Lease, 0, len(s.Holders))
	for _, h := range s.Holders {
		if h.Expires > now {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmpInt(a.Token, b.Token) })
	return out
}

// Holds reports whether token holds a live permit at now.
func (s *LeaseState) Holds(now, token int64) bool {
	for _, h := range s.Holders {
		if h.Token == token && h.Expires > now {
			return true
		}
	}
	return false
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// LeaseWakeups is a registry of release watchers by id, for backends
// implementing LeaseWatcher: Watch registers, Wake signals every watcher of
// an id without blocking. It is safe for concurrent use; the zero value is
// ready.
type LeaseWakeups struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{}
	n  int
}

// Watch registers a watcher of id. first is true when it is the only
// watcher of any id (a backend may then start listening); stop unregisters
// it and reports whether it was the last one (a backend may then stop).
func (w *LeaseWakeups) Watch(id string) (ch <-chan struct{}, stop func() (last bool), first bool) {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	if w.m == nil {
		w.m = make(map[string]map[chan struct{}]struct{})
	}
	ws := w.m[id]
	if ws == nil {
		ws = make(map[chan struct{}]struct{})
		w.m[id] = ws
	}
	ws[c] = struct{}{}
	w.n++
	first = w.n == 1
	w.mu.Unlock()
	var once sync.Once
	return c, func() (last bool) {
		once.Do(func() {
			w.mu.Lock()
			delete(ws, c)
			if len(ws) == 0 {
				delete(w.m, id)
			}
			w.n--
			last = w.n == 0
			w.mu.Unlock()
		})
		return last
	}, first
}

// Wake signals every watcher of id.
func (w *LeaseWakeups) Wake(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for c := range w.m[id] {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// WakeAll signals every watcher of every id.
func (w *LeaseWakeups) WakeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ws := range w.m {
		for c := range ws {
			select {
			case c <- struct{}{}:
			default:
			}
		}
	}
}
