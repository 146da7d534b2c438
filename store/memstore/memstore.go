// Package memstore is the in-process rate store: sharded, goroutine-safe,
// allocation-free on the decision path for keys it already holds, and bounded
// in memory.
//
// A GCRA decision on a key the store holds takes no lock: it finds the key's
// cell, loads its TAT, decides, and compare-and-swaps the new TAT in, so
// cores deciding on different keys share nothing but read-only index lines.
// Everything else (new keys, window algorithms, multi-key takes, settles,
// syncs, resets, sweeps, and every decision that reads a fake clock, whose
// clamp needs the lock; a Take whose Now the caller sets needs no clamp and
// is lock-free on any clock) runs under the shard's lock, and freezes a GCRA cell before
// rewriting it, so that the two paths never interleave inside one decision.
//
// Time is the process clock: the real one is read as wall time at New plus
// monotonic time since, which never runs backwards; any other clock is
// clamped per shard so that it never does either. A key's state reads as
// nothing once it is fresh under the limit that wrote it (store.Live), swept
// yet or not. A key is dropped only once its state equals a fresh key's (a
// GCRA key whose TAT has passed, a window key whose windows have ended), so
// eviction never hands out budget. Under a flood of unique keys the store
// sweeps such keys away as it grows; if MaxKeys keys, or keys of MaxBytes
// bytes, still hold state, a request for a new key fails with
// store.ErrTooManyKeys rather than forget what an old key owes. Stats counts
// the keys swept and the requests refused.
package memstore

import (
	"context"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

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
	// MaxBytes bounds the memory the keys holding state may take: each
	// counts its key's length plus EntryOverhead bytes (its cell and index
	// slots). Zero means DefaultMaxBytes. Like MaxKeys it is split evenly
	// over the shards.
	MaxBytes int64
}

// DefaultMaxBytes is the MaxBytes of a zero Config: 512 MiB.
const DefaultMaxBytes = 512 << 20

// EntryOverhead is what MaxBytes counts for a key beyond its own bytes.
const EntryOverhead = 96

// entryBytes is what MaxBytes counts for key.
func entryBytes(key string) int64 { return int64(len(key)) + EntryOverhead }

// Stats is a snapshot of a Store's size and of what its bounds did.
type Stats struct {
	Keys     int   // keys holding state
	Bytes    int64 // what MaxBytes counts for them
	MaxKeys  int   // the bounds, as the shards apply them
	MaxBytes int64
	// Evicted counts the keys dropped because their state had become a
	// fresh key's (by the store's sweeps or Sweep; never one that owes
	// anything), Refused the requests for a new key that failed with
	// store.ErrTooManyKeys because the store was full (with those of a
	// Leases built on this store: its acquires and fenced writes).
	Evicted, Refused int64
}

// bounds are the per-shard bounds and the counters of what they did. The
// counters have cache lines of their own: sweeps write them, and lock-free
// decisions read the Store fields around them.
type bounds struct {
	keys             int   // per shard
	bytes            int64 // per shard
	_                [48]byte
	evicted, refused atomic.Int64
	_                [48]byte
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
	maxPerShard int // == lim.keys
	lim         bounds
}

var (
	_ store.RateStore     = (*Store)(nil)
	_ store.PreparedTaker = (*Store)(nil)
	_ store.LeaseKeeper   = (*Store)(nil)
	_ store.RateSharer    = (*Store)(nil)
	_ store.RateSharer    = (*Leases)(nil)
)

// shard is one lock and its table. A GCRA decision on a key the shard holds
// reads only the table's index pointer (the first cache line, which only
// inserts, deletes and sweeps write, under the lock) and the key's cell: it
// takes no lock. Every
// other operation takes the lock, whose fields fill the second line. The
// struct is 128 bytes so that each line is the shard's own (the shard array
// is a large allocation, so page-aligned).
type shard struct {
	t         table
	_         [32]byte
	mu        sync.Mutex
	last      int64 // latest now used in this shard: the monotonic clamp
	minFresh  int64 // no entry becomes fresh before this (may be stale low)
	nextSweep int   // sweep when n reaches this (not on the decision path)
	_         [32]byte
}

// The shard is two cache lines, as its doc says.
var _ [128]struct{} = [unsafe.Sizeof(shard{})]struct{}{}

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
	maxBytes := cfg.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
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
	s.lim.keys = s.maxPerShard
	// Every shard can hold at least one key of the longest kind.
	s.lim.bytes = max(maxBytes/int64(p), entryBytes(string(make([]byte, store.MaxIDBytes))))
	if cfg.Clock == nil {
		s.real, s.start = true, time.Now()
		s.base = s.start.UnixMicro()
	}
	for i := range s.shards {
		s.shards[i].t.init(s.hash)
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

// decideNow returns the time a locked shard decides at: the override as
// given, or the clock clamped never to run backwards in this shard.
func (sh *shard) decideNow(override, t int64) int64 {
	if override != 0 {
		return override
	}
	return sh.now(t)
}

func (sh *shard) get(h uint64, name, key string) *cell { return sh.t.find(h, name, key) }

// read freezes c (nil for none) in a locked shard and returns its state
// twice: as stored, to unfreeze it with, and as the caller's working copy,
// which it turns into what the key reads at the decision's instant
// (store.Live) once it knows that instant.
func (sh *shard) read(c *cell) (stored, st store.State) {
	if c != nil {
		stored = c.freeze()
	}
	return stored, stored
}

// lockedNow returns the time a locked shard decides at on the key whose
// cell c (nil for none) it has just frozen; t is the clock read before the
// lock. A lock-free decision reads the real clock before it swaps its TAT
// in, and the clamp never sees that reading: so on a GCRA cell the clock is
// read again after the freeze, which no swap follows, and the decision is
// never dated before one already applied to the key.
func (s *Store) lockedNow(sh *shard, c *cell, override, t int64) int64 {
	if override == 0 && s.real && c != nil && c.gcra() {
		t = s.clockMicros(0)
	}
	return sh.decideNow(override, t)
}

// lockFree reports whether a decision at the given override may skip the
// shard lock: it needs no clamp, because its time is the caller's or the
// real clock's, which never runs backwards.
func (s *Store) lockFree(override int64) bool { return override != 0 || s.real }

// Take implements store.RateStore.
func (s *Store) Take(_ context.Context, p store.TakeParams) (store.Result, error) {
	if err := store.CheckKey(p.Key); err != nil {
		return store.Result{}, err
	}
	override := store.NowMicros(p.Now)
	t := s.clockMicros(override)
	h := s.hash(p.Key)
	sh := s.shard(h)
	var res store.Result
	if p.Limit.Algorithm == store.GCRA && s.lockFree(override) {
		if c := sh.get(h, p.Limit.Name, p.Key); c != nil && c.gcra() {
			for {
				cur := c.time.Load()
				if !live(cur) {
					break
				}
				st := store.State{Time: cur}
				if err := store.Eval(&p.Limit, &st, t, p.Cost, p.MaxDelay, &res); err != nil {
					return store.Result{}, err
				}
				if st.Time == cur || c.time.CompareAndSwap(cur, st.Time) {
					return res, nil
				}
			}
		}
	}
	sh.mu.Lock()
	c := sh.get(h, p.Limit.Name, p.Key)
	stored, st := sh.read(c)
	now := s.lockedNow(sh, c, override, t)
	if c != nil {
		st = store.Live(stored, c.freshOf(stored), now)
	}
	before := st
	err := store.Eval(&p.Limit, &st, now, p.Cost, p.MaxDelay, &res)
	if err == nil && st != before {
		err = sh.put(h, c, &p.Limit, p.Key, st, now, &s.lim)
	} else if c != nil {
		c.unfreeze(stored)
	}
	sh.mu.Unlock()
	if err != nil {
		return store.Result{}, err
	}
	return res, nil
}

// KeepLeases returns a new lease store on this store's memory
// (store.LeaseKeeper): its mixed operations charge this store's rates.
func (s *Store) KeepLeases() store.LeaseStore { return NewLeases(LeasesConfig{Rates: s}) }

// Rates returns s (store.RateSharer). A Leases built on s shares it, as
// the Store it embeds.
func (s *Store) Rates() store.RateStore { return s }

// TakePrepared is Take for a limit prepared with store.Prepare, at the
// store clock and with no MaxDelay, writing the outcome to *res; its
// decisions are exactly Take's.
func (s *Store) TakePrepared(key string, l *store.Prepared, cost int64, res *store.Result) error {
	r, err := s.DecidePrepared(key, l, cost)
	*res = r
	return err
}

// DecidePrepared is TakePrepared returning the outcome: the copy-free path
// the limiter takes for every Allow on the embedded store, through the
// store.PreparedTaker capability (an interface call, where a pointer to the
// caller's result would escape to the heap).
func (s *Store) DecidePrepared(key string, l *store.Prepared, cost int64) (res store.Result, err error) {
	if err := store.CheckKey(key); err != nil {
		return store.Result{}, err
	}
	t := s.clockMicros(0)
	h := s.hash(key)
	sh := s.shard(h)
	name := l.Name()
	gcra := l.IsGCRA()
	if gcra && s.real {
		// The lock-free path: load the TAT, decide, swap the new one in.
		// A denial changes nothing and is decided at the load.
		if c := sh.get(h, name, key); c != nil && c.gcra() {
			for {
				cur := c.time.Load()
				if !live(cur) {
					break // left the table, or a lock holder has it
				}
				st := store.State{Time: cur}
				if err := l.Eval(&st, t, cost, 0, &res); err != nil {
					return store.Result{}, err
				}
				if st.Time == cur || c.time.CompareAndSwap(cur, st.Time) {
					return res, nil
				}
			}
		}
	}
	sh.mu.Lock()
	c := sh.get(h, name, key)
	stored, st := sh.read(c)
	now := s.lockedNow(sh, c, 0, t)
	if c != nil {
		st = store.Live(stored, c.freshOf(stored), now)
	}
	before := st
	err = l.Eval(&st, now, cost, 0, &res)
	if err == nil && st != before {
		err = sh.putFresh(h, c, name, key, gcra, st, l.FreshAt(&st), now, &s.lim)
	} else if c != nil {
		c.unfreeze(stored)
	}
	sh.mu.Unlock()
	if err != nil {
		return store.Result{}, err
	}
	return res, nil
}

// room makes room for n new keys of nb bytes (entryBytes) in a locked
// shard: it sweeps fresh keys when the shard has grown or would be over its
// byte bound, and fails if the shard is still full. No cell of the shard
// may be frozen.
func (sh *shard) room(n int, nb int64, now int64, lim *bounds) error {
	overBytes := sh.t.bytes+nb > lim.bytes
	if sh.t.n+n <= sh.nextSweep && !overBytes {
		return nil
	}
	if (sh.t.n+n <= lim.keys && !overBytes) || now >= sh.minFresh {
		lim.evicted.Add(int64(sh.sweep(now)))
	}
	sh.nextSweep = min(max(2*sh.t.n, minSweep), lim.keys)
	if sh.t.n+n > lim.keys || sh.t.bytes+nb > lim.bytes {
		lim.refused.Add(1)
		return store.ErrTooManyKeys
	}
	return nil
}

// put stores ns for (l.Name, key) in a locked shard; c is the key's cell,
// frozen, or nil. A new key that would hold state needs room first.
func (sh *shard) put(h uint64, c *cell, l *store.Limit, key string, ns store.State, now int64, lim *bounds) error {
	fa := store.FreshAt(*l, ns)
	return sh.putFresh(h, c, l.Name, key, l.Algorithm == store.GCRA, ns, fa, now, lim)
}

// putFresh is put with the state's fresh time already known; gcra says
// whether the limit is a GCRA limit.
func (sh *shard) putFresh(h uint64, c *cell, name, key string, gcra bool, ns store.State, fa, now int64, lim *bounds) error {
	if fa <= now {
		// Fresh under the limit that wrote it: nothing (store.Kept).
		ns, fa = store.State{}, 0
	}
	// A lock-free cell holds a bare TAT. A GCRA decision keeps the counts
	// of a key that held window state (store.Eval): such a state stays in
	// a locked cell.
	gcra = gcra && ns.Count == 0 && ns.Prev == 0
	if c != nil {
		if c.gcra() == gcra {
			c.thaw(ns, fa)
			sh.minFresh = min(sh.minFresh, fa)
			return nil
		}
		// The limit changed algorithm (a policy reload). A cell's kind
		// is fixed, since lock-free takes rely on it: a new cell of the
		// right kind takes the old one's place.
		sh.t.remove(h, name, key)
		if fa > now {
			sh.insert(h, name, key, gcra, ns, fa)
		}
		return nil
	}
	if fa <= now {
		return nil // fresh: nothing to remember
	}
	if err := sh.room(1, entryBytes(key), now, lim); err != nil {
		return err
	}
	sh.insert(h, name, key, gcra, ns, fa)
	return nil
}

// insert adds a cell to a locked shard that has room for it.
func (sh *shard) insert(h uint64, name, key string, gcra bool, ns store.State, fa int64) {
	if sh.t.n == 0 || fa < sh.minFresh {
		sh.minFresh = fa
	}
	sh.t.insert(h, newCell(name, key, gcra, ns, fa))
}

// sweep drops every entry that is fresh at now, recomputes minFresh, and
// returns how many it dropped.
func (sh *shard) sweep(now int64) int {
	n := sh.t.n
	sh.minFresh = sh.t.sweep(now)
	return n - sh.t.n
}

// Sweep drops every key whose state equals a fresh key's. The store sweeps
// by itself as it grows; call Sweep to return memory sooner.
func (s *Store) Sweep() {
	t := s.clockMicros(0)
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if n := sh.sweep(sh.now(t)); n > 0 {
			s.lim.evicted.Add(int64(n))
		}
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

// Stats returns the store's size and the counts of its bounds. It takes
// each shard's lock in turn.
func (s *Store) Stats() Stats {
	st := Stats{
		MaxKeys: s.lim.keys * len(s.shards), MaxBytes: s.lim.bytes * int64(len(s.shards)),
		Evicted: s.lim.evicted.Load(), Refused: s.lim.refused.Load(),
	}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Keys += sh.t.n
		st.Bytes += sh.t.bytes
		sh.mu.Unlock()
	}
	return st
}

// TakeAll implements store.RateStore. It locks the shards of every item in
// index order, freezes every item's cell, decides every item at one
// instant (read after the freezes, see lockedNow), and commits only if all
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
	if err := store.CheckNow(p.Now); err != nil {
		return store.AllResult{}, err
	}
	slices.Sort(order)
	order = slices.Compact(order)
	override := store.NowMicros(p.Now)
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

	// Make room for every key this call may insert before deciding (and
	// before freezing anything, since making room may sweep), so that the
	// commit below cannot fail half way.
	type ref struct {
		h         uint64
		name, key string
	}
	type need struct {
		n     int   // keys
		bytes int64 // their entryBytes
	}
	news := make(map[uint64]need)
	seen := make(map[ref]bool, len(p.Items))
	for i, it := range p.Items {
		r := ref{hs[i], it.Limit.Name, it.Key}
		// A held key that is fresh counts as new too: making room may
		// sweep it, and the commit must then find room to insert it again.
		if c := s.shard(hs[i]).get(hs[i], it.Limit.Name, it.Key); !seen[r] && (c == nil || c.freshTime() <= now) {
			nd := news[hs[i]&s.mask]
			nd.n++
			nd.bytes += entryBytes(it.Key)
			news[hs[i]&s.mask] = nd
		}
		seen[r] = true
	}
	for i, nd := range news {
		if err := s.shards[i].room(nd.n, nd.bytes, now, &s.lim); err != nil {
			return store.AllResult{}, err
		}
	}

	// Freeze each item's cell once; items naming the same (limit, key)
	// see each other's charges.
	type held struct {
		c      *cell
		stored store.State // as frozen, to unfreeze with
		before store.State // as read at now (store.Live)
		st     store.State
		by     *store.Limit // the limit of the last item that changed st
	}
	cells := make(map[ref]*held, len(p.Items))
	thawAll := func() {
		for _, hc := range cells {
			if hc.c != nil {
				hc.c.unfreeze(hc.stored)
			}
		}
	}
	refresh := false // a GCRA cell was frozen: read the clock again (lockedNow)
	for i, it := range p.Items {
		r := ref{hs[i], it.Limit.Name, it.Key}
		if cells[r] != nil {
			continue
		}
		hc := &held{c: s.shard(hs[i]).get(hs[i], it.Limit.Name, it.Key)}
		if hc.c != nil {
			hc.stored = hc.c.freeze()
			refresh = refresh || hc.c.gcra()
		}
		cells[r] = hc
	}
	if refresh && override == 0 && s.real {
		now = max(now, s.clockMicros(0))
		for _, i := range order {
			s.shards[i].last = now
		}
	}
	for _, hc := range cells {
		if hc.c != nil {
			hc.before = store.Live(hc.stored, hc.c.freshOf(hc.stored), now)
		}
		hc.st = hc.before
	}
	out := store.AllResult{Allowed: true, Results: make([]store.Result, len(p.Items))}
	for i, it := range p.Items {
		hc := cells[ref{hs[i], it.Limit.Name, it.Key}]
		was := hc.st
		if err := store.Eval(&it.Limit, &hc.st, now, it.Cost, p.MaxDelay, &out.Results[i]); err != nil {
			thawAll()
			return store.AllResult{}, err
		}
		if hc.st != was {
			hc.by = &p.Items[i].Limit
		}
		out.Allowed = out.Allowed && out.Results[i].Allowed
	}
	if !out.Allowed {
		// Nothing is charged. An item that had room on its own says so,
		// with what it has now: a peek at its stored state.
		thawAll()
		for i, it := range p.Items {
			if !out.Results[i].Allowed {
				continue
			}
			cur := cells[ref{hs[i], it.Limit.Name, it.Key}].before
			if err := store.Eval(&it.Limit, &cur, now, 0, 0, &out.Results[i]); err != nil {
				// Its stored state is out of range for this limit
				// (store.Eval), as on every backend.
				return store.AllResult{}, err
			}
		}
		return out, nil
	}
	// Commit the held cells first, which thaws them, and only then insert
	// the new keys: an insert may sweep (room), and a sweep must find no
	// cell frozen.
	done := make(map[ref]bool, len(cells))
	for _, held := range []bool{true, false} {
		for i, it := range p.Items {
			r := ref{hs[i], it.Limit.Name, it.Key}
			hc := cells[r]
			if done[r] || (hc.c != nil) != held {
				continue
			}
			done[r] = true
			if hc.st == hc.before {
				if hc.c != nil {
					hc.c.unfreeze(hc.stored)
				}
				continue
			}
			// The limit that wrote the state decides when it is fresh.
			if err := s.shard(hs[i]).put(hs[i], hc.c, hc.by, it.Key, hc.st, now, &s.lim); err != nil {
				return store.AllResult{}, err // unreachable: room was made above
			}
		}
	}
	return out, nil
}

// update runs f on the state of one key under its shard's lock, at the
// clamped store time (or the override), and stores what f returns if that
// differs. The result is a peek after the update.
func (s *Store) update(key string, l store.Limit, override int64, f func(cur store.State, now int64) (store.State, error)) (store.Result, error) {
	if err := store.CheckKey(key); err != nil {
		return store.Result{}, err
	}
	if err := l.Validate(); err != nil {
		return store.Result{}, err
	}
	t := s.clockMicros(override)
	h := s.hash(key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	c := sh.get(h, l.Name, key)
	stored, cur := sh.read(c)
	now := s.lockedNow(sh, c, override, t)
	if c != nil {
		cur = store.Live(stored, c.freshOf(stored), now)
	}
	ns, err := f(cur, now)
	put := err == nil && ns != cur
	if put {
		// An unchanged state is not written: one fresh under l but
		// written under another algorithm stays (store.Kept).
		err = sh.put(h, c, &l, key, ns, now, &s.lim)
	}
	if (!put || err != nil) && c != nil {
		c.unfreeze(stored)
	}
	if err != nil {
		return store.Result{}, err
	}
	var res store.Result
	err = store.Eval(&l, &ns, now, 0, 0, &res)
	return res, err
}

// Settle implements store.RateStore.
func (s *Store) Settle(_ context.Context, p store.SettleParams) (store.Result, error) {
	return s.update(p.Key, p.Limit, store.NowMicros(p.Now), func(cur store.State, now int64) (store.State, error) {
		return store.EvalSettle(cur, now, &p)
	})
}

// Sync implements store.RateStore.
func (s *Store) Sync(_ context.Context, p store.SyncParams) (store.Result, error) {
	return s.update(p.Key, p.Limit, store.NowMicros(p.Now), func(cur store.State, now int64) (store.State, error) {
		return store.EvalSync(cur, now, &p)
	})
}

// Reset implements store.RateStore.
func (s *Store) Reset(_ context.Context, p store.ResetParams) error {
	if err := store.CheckKey(p.Key); err != nil {
		return err
	}
	if err := store.CheckID("limit name", p.Limit.Name); err != nil {
		return err
	}
	h := s.hash(p.Key)
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.t.remove(h, p.Limit.Name, p.Key)
	return nil
}
