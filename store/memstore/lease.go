package memstore

import (
	"context"
	"hash/maphash"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
)

// LeasesConfig configures Leases. The zero value is ready to use.
type LeasesConfig struct {
	// Clock is the store clock. Nil means Rates' clock, or the real clock.
	Clock clock.Clock
	// Rates is the rate store TakeAllAcquire charges. Nil means a new
	// Store with the same clock.
	Rates *Store
	// MaxBytes bounds the memory live leases and fenced values may take:
	// each lease counts its name, key and holder plus EntryOverhead, each
	// fenced value its name, key, field and value plus EntryOverhead. An
	// acquire or fenced write beyond it fails with store.ErrTooManyKeys
	// (expired leases are dropped first; a live one never is). Zero means
	// the MaxBytes of Rates when it is set, else DefaultMaxBytes. It is
	// split evenly over the shards.
	MaxBytes int64
}

// Leases is the in-process store.LeaseStore (and, with its rate store,
// store.RateLeaseStore). It is safe for concurrent use. Build it with
// NewLeases; the zero value is not usable.
//
// Fencing tokens come from one counter per Leases, so they strictly increase
// per key and across keys for the life of the process (an in-process store
// keeps nothing across restarts). A key's entry is dropped once no lease of
// it is live; fenced values are kept until the process ends. MaxBytes
// bounds both.
type Leases struct {
	*Store   // the rate half, for TakeAllAcquire and store.RateLeaseStore
	clk      clock.Clock
	seed     maphash.Seed
	tokens   atomic.Int64
	maxBytes int64 // per shard
	shards   [leaseShards]leaseShard
}

const leaseShards = 64

var (
	_ store.RateLeaseStore = (*Leases)(nil)
	_ store.LeaseWatcher   = (*Leases)(nil)
)

type leaseKey struct{ name, key string }

type fenceKey struct{ name, key, field string }

type leaseShard struct {
	mu        sync.Mutex
	last      int64 // the clock clamp
	m         map[leaseKey]*store.LeaseState
	fence     map[fenceKey]store.FencedValue
	watchers  map[leaseKey]map[chan struct{}]struct{}
	nextSweep int
	// bytes is at least what MaxBytes counts for the shard: adds are
	// counted as they happen, drops only by recount. recountAt is when a
	// recount that left the shard full may next find room (the earliest
	// expiry then, or sooner after a release).
	bytes, recountAt int64
	_                [24]byte
}

// NewLeases returns a Leases.
func NewLeases(cfg LeasesConfig) *Leases {
	l := &Leases{clk: clock.Or(cfg.Clock), seed: maphash.MakeSeed(), Store: cfg.Rates}
	if cfg.Clock == nil && cfg.Rates != nil {
		l.clk = cfg.Rates.clk
	}
	if l.Store == nil {
		l.Store = New(Config{Clock: cfg.Clock})
	}
	l.maxBytes = cfg.MaxBytes
	if l.maxBytes <= 0 {
		l.maxBytes = DefaultMaxBytes
		if cfg.Rates != nil {
			l.maxBytes = cfg.Rates.lim.bytes * int64(len(cfg.Rates.shards))
		}
	}
	// Every shard can hold at least one lease of the longest kind.
	l.maxBytes = max(l.maxBytes/leaseShards, 2*store.MaxIDBytes+store.MaxHolderLen+EntryOverhead)
	for i := range l.shards {
		sh := &l.shards[i]
		sh.m = make(map[leaseKey]*store.LeaseState)
		sh.fence = make(map[fenceKey]store.FencedValue)
		sh.watchers = make(map[leaseKey]map[chan struct{}]struct{})
		sh.nextSweep = minSweep
	}
	return l
}

func (l *Leases) shard(name, key string) *leaseShard {
	var h maphash.Hash
	h.SetSeed(l.seed)
	h.WriteString(name)
	h.WriteByte(0)
	h.WriteString(key)
	return &l.shards[h.Sum64()%leaseShards]
}

// lock locks the shard of (name, key) and returns it with the time to
// decide at: the override, or the clock clamped never to run backwards.
func (l *Leases) lock(name, key string, override time.Time) (*leaseShard, int64) {
	sh := l.shard(name, key)
	t := store.NowMicros(override)
	var now int64
	if t == 0 {
		now = l.clk.Now().UnixMicro()
	}
	sh.mu.Lock()
	if t != 0 {
		return sh, t
	}
	sh.last = max(sh.last, now)
	return sh, sh.last
}

func (l *Leases) next() (int64, error) { return l.tokens.Add(1), nil }

// state returns the state of k, creating it.
func (sh *leaseShard) state(k leaseKey, now int64) *store.LeaseState {
	st := sh.m[k]
	if st == nil {
		if len(sh.m) >= sh.nextSweep {
			for k2, s2 := range sh.m {
				if s2.Expire(now); len(s2.Holders) == 0 {
					delete(sh.m, k2)
				}
			}
			sh.nextSweep = max(2*len(sh.m), minSweep)
		}
		st = &store.LeaseState{}
		sh.m[k] = st
	}
	return st
}

func leaseBytes(k leaseKey, holder string) int64 {
	return int64(len(k.name)+len(k.key)+len(holder)) + EntryOverhead
}

func fenceBytes(k fenceKey, v []byte) int64 {
	return int64(len(k.name)+len(k.key)+len(k.field)+len(v)) + EntryOverhead
}

// room makes room for n more bytes in a locked shard at now: when the
// running count says the shard would be over its bound, it drops expired
// leases and counts again; it fails if the shard is still full.
func (l *Leases) room(sh *leaseShard, n, now int64) error {
	if sh.bytes+n <= l.maxBytes {
		return nil
	}
	if now >= sh.recountAt {
		var b int64
		next := int64(math.MaxInt64)
		for k, st := range sh.m {
			st.Expire(now)
			if len(st.Holders) == 0 {
				delete(sh.m, k)
				continue
			}
			for _, h := range st.Holders {
				b += leaseBytes(k, h.Holder)
				next = min(next, h.Expires)
			}
		}
		for k, v := range sh.fence {
			b += fenceBytes(k, v.Value)
		}
		sh.bytes, sh.recountAt = b, next
	}
	if sh.bytes+n > l.maxBytes {
		l.Store.lim.refused.Add(1)
		return store.ErrTooManyKeys
	}
	return nil
}

// added counts a new lease of n bytes that expires at exp.
func (sh *leaseShard) added(n, exp int64) {
	sh.bytes += n
	sh.recountAt = min(sh.recountAt, exp)
}

// tidy drops k's entry once nothing holds it.
func (sh *leaseShard) tidy(k leaseKey, st *store.LeaseState) {
	if len(st.Holders) == 0 {
		delete(sh.m, k)
	}
}

// Acquire implements store.LeaseStore.
func (l *Leases) Acquire(_ context.Context, p store.AcquireParams) (store.AcquireResult, error) {
	if err := p.Check(); err != nil {
		return store.AcquireResult{}, err
	}
	sh, now := l.lock(p.Name, p.Key, p.Now)
	defer sh.mu.Unlock()
	k := leaseKey{p.Name, p.Key}
	if err := l.room(sh, leaseBytes(k, p.Holder), now); err != nil {
		return store.AcquireResult{}, err
	}
	st := sh.state(k, now)
	res, err := st.Acquire(now, &p, l.next)
	if err == nil && res.Acquired && !res.Renewed {
		sh.added(leaseBytes(k, p.Holder), res.Lease.Expires)
	}
	sh.tidy(k, st)
	return res, err
}

// Renew implements store.LeaseStore.
func (l *Leases) Renew(_ context.Context, p store.RenewParams) (store.Lease, error) {
	if err := p.Check(); err != nil {
		return store.Lease{}, err
	}
	sh, now := l.lock(p.Name, p.Key, p.Now)
	defer sh.mu.Unlock()
	k := leaseKey{p.Name, p.Key}
	st := sh.m[k]
	if st == nil {
		return store.Lease{}, store.ErrLeaseNotHeld
	}
	ls, err := st.Renew(now, &p)
	sh.tidy(k, st)
	return ls, err
}

// Release implements store.LeaseStore.
func (l *Leases) Release(_ context.Context, p store.ReleaseParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	sh, now := l.lock(p.Name, p.Key, p.Now)
	defer sh.mu.Unlock()
	k := leaseKey{p.Name, p.Key}
	st := sh.m[k]
	if st == nil {
		return store.ErrLeaseNotHeld
	}
	err := st.Release(now, &p)
	sh.tidy(k, st)
	if err == nil {
		sh.recountAt = 0 // the next full shard counts again
		for ch := range sh.watchers[k] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	return err
}

// Holders implements store.LeaseStore.
func (l *Leases) Holders(_ context.Context, p store.HoldersParams) ([]store.Lease, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return nil, err
	}
	if err := store.CheckNow(p.Now); err != nil {
		return nil, err
	}
	sh, now := l.lock(p.Name, p.Key, p.Now)
	defer sh.mu.Unlock()
	st := sh.m[leaseKey{p.Name, p.Key}]
	if st == nil {
		return []store.Lease{}, nil
	}
	return st.Live(now), nil
}

// FencedWrite implements store.LeaseStore.
func (l *Leases) FencedWrite(_ context.Context, p store.FencedWriteParams) error {
	if err := p.Check(); err != nil {
		return err
	}
	sh, now := l.lock(p.Name, p.Key, p.Now)
	defer sh.mu.Unlock()
	st := sh.m[leaseKey{p.Name, p.Key}]
	if st == nil || !st.Holds(now, p.Token) {
		return store.ErrStaleToken
	}
	fk := fenceKey{p.Name, p.Key, p.Field}
	cur, ok := sh.fence[fk]
	if ok && cur.Token > p.Token {
		return store.ErrStaleToken
	}
	if err := l.room(sh, fenceBytes(fk, p.Value), now); err != nil {
		return err
	}
	sh.fence[fk] = store.FencedValue{Value: slices.Clone(p.Value), Token: p.Token}
	sh.bytes += fenceBytes(fk, p.Value)
	if ok {
		sh.recountAt = 0 // the old value is gone: a recount finds it
	}
	return nil
}

// FencedRead implements store.LeaseStore.
func (l *Leases) FencedRead(_ context.Context, p store.FencedReadParams) (store.FencedValue, bool, error) {
	if err := store.CheckLeaseKey(p.Name, p.Key); err != nil {
		return store.FencedValue{}, false, err
	}
	sh := l.shard(p.Name, p.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.fence[fenceKey{p.Name, p.Key, p.Field}]
	v.Value = slices.Clone(v.Value)
	return v, ok, nil
}

// WatchLease implements store.LeaseWatcher.
func (l *Leases) WatchLease(_ context.Context, name, key string) (<-chan struct{}, func(), error) {
	if err := store.CheckLeaseKey(name, key); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{}, 1)
	k := leaseKey{name, key}
	sh := l.shard(name, key)
	sh.mu.Lock()
	ws := sh.watchers[k]
	if ws == nil {
		ws = make(map[chan struct{}]struct{})
		sh.watchers[k] = ws
	}
	ws[ch] = struct{}{}
	sh.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			sh.mu.Lock()
			delete(ws, ch)
			if len(ws) == 0 {
				delete(sh.watchers, k)
			}
			sh.mu.Unlock()
		})
	}, nil
}

// TakeAllAcquire implements store.RateLeaseStore: under the lease key's
// lock, it acquires only if a permit is free and every rate item is
// allowed, and charges the rates only if the lease is acquired.
func (l *Leases) TakeAllAcquire(ctx context.Context, p store.TakeAllAcquireParams) (store.TakeAllAcquireResult, error) {
	lp := p.Lease
	lp.Now = p.Now
	if err := lp.Check(); err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	for i := range p.Items {
		if err := p.Items[i].Check(); err != nil {
			return store.TakeAllAcquireResult{}, err
		}
	}
	sh, now := l.lock(lp.Name, lp.Key, lp.Now)
	defer sh.mu.Unlock()
	k := leaseKey{lp.Name, lp.Key}
	if err := l.room(sh, leaseBytes(k, lp.Holder), now); err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	st := sh.state(k, now)
	defer sh.tidy(k, st)
	// Decide the lease on a copy first: no token is spent on a denial.
	st.Expire(now)
	trial := store.LeaseState{Holders: slices.Clone(st.Holders)}
	lres, err := trial.Acquire(now, &lp, func() (int64, error) { return 0, nil })
	if err != nil {
		return store.TakeAllAcquireResult{}, err
	}
	out := store.TakeAllAcquireResult{Lease: lres}
	ratesNow := p.Now
	if !lres.Acquired {
		// Nothing is charged: report the rates as a peek.
		peek := make([]store.Item, len(p.Items))
		for i, it := range p.Items {
			it.Cost = 0
			peek[i] = it
		}
		out.Rates, err = l.TakeAll(ctx, store.TakeAllParams{Items: peek, Now: ratesNow})
		if err == nil && len(p.Items) == 0 {
			out.Rates.Results = []store.Result{}
		}
		return out, err
	}
	out.Rates, err = l.TakeAll(ctx, store.TakeAllParams{Items: p.Items, Now: ratesNow})
	if err != nil || !out.Rates.Allowed {
		out.Lease = store.AcquireResult{Held: int64(len(st.Holders)), At: now}
		return out, err
	}
	out.Lease, err = st.Acquire(now, &lp, l.next)
	out.Allowed = err == nil && out.Lease.Acquired
	if out.Allowed && !out.Lease.Renewed {
		sh.added(leaseBytes(k, lp.Holder), out.Lease.Lease.Expires)
	}
	return out, err
}
