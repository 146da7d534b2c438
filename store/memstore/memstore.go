// Package memstore is the in-process rate store: sharded, goroutine-safe,
// allocation-free on the decision path for keys it already holds, and bounded
// in memory.
//
// Time is the process clock, clamped per shard so that it never runs
// backwards. A key is dropped only once its state equals a fresh key's (a
// GCRA key whose TAT has passed, a window key whose windows have ended), so
// eviction never hands out budget. Under a flood of unique keys the store
// sweeps such keys away as it grows; if MaxKeys keys still hold state, a
// request for a new key fails with store.ErrTooManyKeys rather than forget
// what an old key owes.
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"time"

	"github.com/sluicerl/sluice/clock"
	"github.com/sluicerl/sluice/store"
)

// Config configures a Store. The zero value is ready to use.
type Config struct {
	// Clock is the store clock. Nil means the real clock.
	Clock clock.Clock
	// Shards is the number of independently locked shards, rounded up to a
	// power of two (and down to at most MaxKeys). Zero means 256.
	Shards int
	// MaxKeys bounds the keys that may hold state at once. Zero means
	// 1<<22 (about 4 million keys, a few hundred MiB).
	MaxKeys int
}

// Store is an in-memory store.RateStore. It is safe for concurrent use. Build
// it with New; the zero value is not usable.
type Store struct {
	clk         clock.Clock
	real        bool      // clk is the real clock: read it through start
	base        int64     // Unix µs of start
	start       time.Time // carries a monotonic reading
	seed        maphash.Seed
	shards      []shard
	mask        uint64
	maxPerShard int
}

var _ store.RateStore = (*Store)(nil)

type shard struct {
	mu        sync.Mutex
	t         table
	last      int64 // latest now used in this shard: the monotonic clamp
	minFresh  int64 // no entry becomes fresh before this (may be stale low)
	nextSweep int   // sweep when n reaches this
	_         [64]byte
}

const minSweep = 1024

// New returns a Store.
func New(cfg Config) *Store {
	n := cfg.Shards
	if n <= 0 {
		n = 256
	}
	maxKeys := cfg.MaxKeys
	if maxKeys <= 0 {
		maxKeys = 1 << 22
	}
	p := 1
	for p < n {
		p <<= 1
	}
	// Every shard holds at least one key and all of them together at most
	// MaxKeys: the per-shard bound rounds down.
	for p > 1 && p > maxKeys {
		p >>= 1
	}
	s := &Store{
		clk:         clock.Or(cfg.Clock),
		seed:        maphash.MakeSeed(),
		shards:      make([]shard, p),
		mask:        uint64(p - 1),
		maxPerShard: maxKeys / p,
	}
	if cfg.Clock == nil {
		s.real, s.start = true, time.Now()
		s.base = s.start.UnixMicro()
	}
	for i := range s.shards {
		s.shards[i].t.hash = s.hash
		s.shards[i].nextSweep = min(minSweep, s.maxPerShard)
	}
	return s
}

func (s *Store) hash(key string) uint64 { return maphash.String(s.seed, key) }

func (s *Store) shard(h uint64) *shard { return &s.shards[h&s.mask] }

// now returns the clamped time for a shard whose lock is held.
func (sh *shard) now(t int64) int64 {
	if t > sh.last {
		sh.last = t
	}
	return sh.last
}

// clockMicros returns the override p, or the store clock when p is 0.
func (s *Store) clockMicros(p int64) int64 {
	if p != 0 {
		return p
	}
	if s.real {
		// The wall time at New plus the monotonic time since: one clock
		// read instead of two, and it never steps backwards.
		return s.base + time.Since(s.start).Microseconds()
	}
	return s.clk.Now().UnixMicro()
}

// micros returns an override time as Unix microseconds, 0 for none.
func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

// decideNow returns the time a locked shard decides at: the override as
// given, or the clock clamped never to run backwards in this shard.
func (sh *shard) decideNow(override, t int64) int64 {
	if override != 0 {
		return override
	}
	return sh.now(t)
}

func (sh *shard) get(h uint64, name, key string) *entry { return sh.t.get(h, name, key) }

// Take implements store.RateStore.
func (s *Store) Take(_ context.Context, p store.TakeParams) (store.Result, error) {
	if p.Key == "" {
		return store.Result{}, store.ErrEmptyKey
	}
	override := micros(p.Now)
	t := s.clockMicros(override)
	h := s.hash(p.Key)
	sh := s.shard(h)
	sh.mu.Lock()
	now := sh.decideNow(override, t)
	e := sh.get(h, p.Limit.Name, p.Key)
	var st store.State
	if e != nil {
		st = e.st
	}
	before := st
	var res store.Result
	err := store.Eval(&p.Limit, &st, now, p.Cost, p.MaxDelay, &res)
	if err == nil && st != before {
		err = sh.put(h, e, &p.Limit, p.Key, st, now, s.maxPerShard)
	}
	sh.mu.Unlock()
	if err != nil {
		return store.Result{}, err
	}
	return res, nil
}

// TakePrepared is Take for a limit prepared with store.Prepare, at the
// store clock and with no MaxDelay, writing the outcome to *res. It is the
// copy-free path the limiter takes for every Allow on the embedded store;
// its decisions are exactly Take's.
func (s *Store) TakePrepared(key string, l *store.Prepared, cost int64, res *store.Result) error {
	if key == "" {
		return store.ErrEmptyKey
	}
	t := s.clockMicros(0)
	h := s.hash(key)
	sh := s.shard(h)
	name := l.Name()
	sh.mu.Lock()
	now := sh.now(t)
	e := sh.get(h, name, key)
	var st store.State
	if e != nil {
		st = e.st
	}
	before := st
	err := l.Eval(&st, now, cost, 0, res)
	if err == nil && st != before {
		err = sh.putFresh(h, e, name, key, st, l.FreshAt(&st), now, s.maxPerShard)
	}
	sh.mu.Unlock()
	return err
}

// room makes room for n new keys in a locked shard: it sweeps fresh keys
// when the shard has grown, and fails if the shard is still full.
func (sh *shard) room(n int, now int64, maxPerShard int) error {
	if sh.t.n+n <= sh.nextSweep {
		return nil
	}
	if sh.t.n+n <= maxPerShard || now >= sh.minFresh {
		sh.sweep(now)
	}
	sh.nextSweep = min(max(2*sh.t.n, minSweep), maxPerShard)
	if sh.t.n+n > maxPerShard {
		return store.ErrTooManyKeys
	}
	return nil
}

// put stores ns for (l.Name, key) in a locked shard; e is the current entry
// or nil. A new key that would hold state needs room first.
func (sh *shard) put(h uint64, e *entry, l *store.Limit, key string, ns store.State, now int64, maxPerShard int) error {
	fa := store.FreshAt(*l, ns)
	return sh.putFresh(h, e, l.Name, key, ns, fa, now, maxPerShard)
}

// putFresh is put with the state's fresh time already known.
func (sh *shard) putFresh(h uint64, e *entry, name, key string, ns store.State, fa, now int64, maxPerShard int) error {
	if e != nil {
		e.st, e.freshAt = ns, fa
		sh.minFresh = min(sh.minFresh, fa)
		return nil
	}
	if fa <= now {
		return nil // fresh: nothing to remember
	}
	if err := sh.room(1, now, maxPerShard); err != nil {
		return err
	}
	if sh.t.n == 0 || fa < sh.minFresh {
		sh.minFresh = fa
	}
	sh.t.insert(h, name, key, ns, fa)
	return nil
}

// sweep drops every entry that is fresh at now and recomputes minFresh.
func (sh *shard) sweep(now int64) { sh.minFresh = sh.t.sweep(now) }

// Sweep drops every key whose state equals a fresh key's. The store sweeps
// by itself as it grows; call Sweep to return memory sooner.
func (s *Store) Sweep() {
	t := s.clockMicros(0)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweep(sh.now(t))
		sh.nextSweep = min(max(2*sh.t.n, minSweep), s.maxPerShard)
		sh.mu.Unlock()
	}
}

// Len returns the number of keys holding state.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.t.n
		sh.mu.Unlock()
	}
	return n
}

// TakeAll implements store.RateStore. It locks the shards of every item in
// index order, decides every item at one instant, and commits only if all
// are allowed.
func (s *Store) TakeAll(_ context.Context, p store.TakeAllParams) (store.AllResult, error) {
	if len(p.Items) == 0 {
		return store.AllResult{Allowed: true}, nil
	}
	hs := make([]uint64, len(p.Items))
	order := make([]uint64, len(p.Items))
	for i, it := range p.Items {
		if err := it.Check(); err != nil {
			return store.AllResult{}, err
		}
		hs[i] = s.hash(it.Key)
		order[i] = hs[i] & s.mask
	}
	slices.Sort(order)
	order = slices.Compact(order)
	override := micros(p.Now)
	t := s.clockMicros(override)
	now := t
	for _, i := range order {
		sh := &s.shards[i]
		sh.mu.Lock()
		if override == 0 {
			now = max(now, sh.last)
		}
	}
	defer func() {
		for _, i := range order {
			s.shards[i].mu.Unlock()
		}
	}()
	if override != 0 {
		now = override
	} else {
		for _, i := range order {
			s.shards[i].last = now
		}
	}

	// Make room for every key this call may insert before deciding, so
	// that the commit below cannot fail half way.
	type ref struct {
		h         uint64
		name, key string
	}
	news := make(map[uint64]int)
	seen := make(map[ref]bool, len(p.Items))
	for i, it := range p.Items {
		r := ref{hs[i], it.Limit.Name, it.Key}
		// A held key that is fresh counts as new too: making room may
		// sweep it, and the commit must then find room to insert it again.
		if e := s.shard(hs[i]).get(hs[i], it.Limit.Name, it.Key); !seen[r] && (e == nil || e.freshAt <= now) {
			news[hs[i]&s.mask]++
		}
		seen[r] = true
	}
	for i, n := range news {
		if err := s.shards[i].room(n, now, s.maxPerShard); err != nil {
			return store.AllResult{}, err
		}
	}

	out := store.AllResult{Allowed: true, Results: make([]store.Result, len(p.Items))}
	// Items naming the same (limit, key) see each other's charges.
	pending := make(map[ref]store.State, len(p.Items))
	for i, it := range p.Items {
		r := ref{hs[i], it.Limit.Name, it.Key}
		cur, ok := pending[r]
		if !ok {
			if e := s.shard(hs[i]).get(hs[i], it.Limit.Name, it.Key); e != nil {
				cur = e.st
			}
		}
		if err := store.Eval(&it.Limit, &cur, now, it.Cost, p.MaxDelay, &out.Results[i]); err != nil {
			return store.AllResult{}, err
		}
		out.Allowed = out.Allowed && out.Results[i].Allowed
		pending[r] = cur
	}
	if !out.Allowed {
		// Nothing is charged. An item that had room on its own says so,
		// with what it has now: a peek at its stored state.
		for i, it := range p.Items {
			if !out.Results[i].Allowed {
				continue
			}
			var cur store.State
			if e := s.shard(hs[i]).get(hs[i], it.Limit.Name, it.Key); e != nil {
				cur = e.st
			}
			_ = store.Eval(&it.Limit, &cur, now, 0, 0, &out.Results[i])
		}
		return out, nil
	}
	for i, it := range p.Items {
		r := ref{hs[i], it.Limit.Name, it.Key}
		sh := s.shard(hs[i])
		e := sh.get(hs[i], it.Limit.Name, it.Key)
		if err := sh.put(hs[i], e, &it.Limit, it.Key, pending[r], now, s.maxPerShard); err != nil {
			return store.AllResult{}, err // unreachable: room was made above
		}
	}
	return out, nil
}

// update runs f on the state of one key under its shard's lock, at the
// clamped store time (or the override), and stores what f returns. The
// result is a peek after the update.
func (s *Store) update(key string, l store.Limit, override int64, f func(cur store.State, now int64) (store.State, error)) (store.Result, error) {
	if key == "" {
		return store.Result{}, store.ErrEmptyKey
	}
	if err := l.Validate(); err != nil {
		return store.Result{}, err
	}
	t := s.clockMicros(override)
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := sh.decideNow(override, t)
	e := sh.get(h, l.Name, key)
	var cur store.State
	if e != nil {
		cur = e.st
	}
	ns, err := f(cur, now)
	if err != nil {
		return store.Result{}, err
	}
	if err := sh.put(h, e, &l, key, ns, now, s.maxPerShard); err != nil {
		return store.Result{}, err
	}
	var res store.Result
	err = store.Eval(&l, &ns, now, 0, 0, &res)
	return res, err
}

// Settle implements store.RateStore.
func (s *Store) Settle(_ context.Context, p store.SettleParams) (store.Result, error) {
	return s.update(p.Key, p.Limit, micros(p.Now), func(cur store.State, now int64) (store.State, error) {
		return store.EvalSettle(cur, now, &p)
	})
}

// Sync implements store.RateStore.
func (s *Store) Sync(_ context.Context, p store.SyncParams) (store.Result, error) {
	return s.update(p.Key, p.Limit, micros(p.Now), func(_ store.State, now int64) (store.State, error) {
		return store.EvalSync(now, &p), nil
	})
}

// Reset implements store.RateStore.
func (s *Store) Reset(_ context.Context, p store.ResetParams) error {
	if p.Key == "" || p.Limit.Name == "" {
		return store.ErrEmptyKey
	}
	h := s.hash(p.Key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if i := sh.t.find(h, p.Limit.Name, p.Key); i >= 0 {
		sh.t.delete(i)
	}
	return nil
}
