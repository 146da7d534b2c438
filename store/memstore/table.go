package memstore

import (
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/sluicerl/sluice/store"
)

// The state word of a cell (its store.State.Time) is read and written with
// atomics, so that a GCRA decision on a key the store already holds needs no
// lock: it loads the word, decides, and compare-and-swaps the new TAT in.
// Two values are never states:
const (
	// dead marks a cell that has left the table (swept or reset). A
	// decision that finds it starts over under the shard lock, where the
	// table is exact.
	dead = math.MinInt64
	// frozen marks a cell that a holder of the shard lock is changing
	// (a multi-key take, a settle, a sync). A lock-free decision that
	// finds it waits its turn on the lock instead.
	frozen = math.MinInt64 + 1
)

// cell is one (limit name, key) state. Its key, name and kind never change
// once it is in a table, so a lookup without the lock may read them.
//
// Rules: time is read and written only with atomics. A GCRA cell's time may
// change at any moment without the lock (by compare-and-swap, never to or
// from dead or frozen); everything else about a cell changes only under its
// shard's lock, and a lock holder that means to rewrite a GCRA cell first
// freezes it (freeze), so that its read-modify-write cannot interleave with
// a lock-free one. Window cells are never touched without the lock.
//
// A cell is 64 bytes, one cache line of its own (the allocator aligns
// 64-byte objects to 64 bytes): a decision that finds its key in the first
// slot it probes touches the index line and this one.
type cell struct {
	key, name string
	time      atomic.Int64
	win       *winState // nil for a GCRA cell; set for good when created
	_         [16]byte
}

// winState is the rest of a window cell's state, under the shard lock.
type winState struct {
	count, prev int64
	freshAt     int64
}

// newCell returns a cell holding st, which is fresh at fa.
func newCell(name, key string, gcra bool, st store.State, fa int64) *cell {
	c := &cell{key: key, name: name}
	if !gcra {
		c.win = &winState{count: st.Count, prev: st.Prev, freshAt: fa}
	}
	c.time.Store(st.Time)
	return c
}

// gcra reports whether the cell holds GCRA state: lock-free takes allowed.
func (c *cell) gcra() bool { return c.win == nil }

// live reports whether a state word is a state (not dead or frozen).
func live(t int64) bool { return t > frozen }

// freeze takes a live cell for a holder of its shard lock and returns its
// state; thaw (or kill) must follow before the lock is released.
func (c *cell) freeze() store.State {
	if w := c.win; w != nil {
		return store.State{Time: c.time.Load(), Count: w.count, Prev: w.prev}
	}
	for {
		t := c.time.Load()
		// Only lock holders freeze or kill, and they thaw before
		// unlocking: under the lock the word is a state.
		if c.time.CompareAndSwap(t, frozen) {
			return store.State{Time: t}
		}
	}
}

// thaw stores st in a cell frozen by freeze; fa is st's fresh time.
func (c *cell) thaw(st store.State, fa int64) {
	if w := c.win; w != nil {
		w.count, w.prev, w.freshAt = st.Count, st.Prev, fa
	}
	c.time.Store(st.Time)
}

// unfreeze puts back the state freeze returned, unchanged.
func (c *cell) unfreeze(st store.State) {
	fa := st.Time
	if c.win != nil {
		fa = c.win.freshAt
	}
	c.thaw(st, fa)
}

// freshOf returns the fresh time of st, the state freeze returned for this
// cell: a window cell's own, a GCRA cell's TAT.
func (c *cell) freshOf(st store.State) int64 {
	if w := c.win; w != nil {
		return w.freshAt
	}
	return st.Time
}

// freshTime returns, under the lock, when the cell equals a fresh key and
// so may be dropped (a GCRA cell only by kill, which checks it is still so).
func (c *cell) freshTime() int64 {
	if w := c.win; w != nil {
		return w.freshAt
	}
	return c.time.Load()
}

// kill marks a cell leaving the table. A GCRA cell is killed only if its
// state word is still t (so that a lock-free take since is never lost); a
// window cell always. It reports whether the cell is dead.
func (c *cell) kill(t int64) bool {
	if c.win != nil {
		c.time.Store(dead)
		return true
	}
	return c.time.CompareAndSwap(t, dead)
}

// index is one generation of a shard's table: an open-addressed hash table
// of cells with linear probing, at most half full. A lookup may run
// without the lock on whatever generation it loaded: inserts store into
// empty slots atomically, a resize or sweep publishes a new generation, and
// a delete shifts slots in place, so a lock-free lookup may miss a key the
// table holds (it then retries under the lock) but never finds a wrong one
// (keys are immutable, and a cell that left is dead).
//
// A slot holds the cell's address plus a 6-bit tag from its key's hash (a
// cell is 64-byte aligned, so the low 6 bits of its address are free; the
// tagged pointer still points into the cell, which keeps it alive). A
// lookup reads a cell only when the tag matches, so a probe past another
// key's slot does not touch that key's cache line.
type index struct {
	slots []atomic.Pointer[byte]
	mask  uint64
}

func newIndex(size int) *index {
	return &index{slots: make([]atomic.Pointer[byte], size), mask: uint64(size - 1)}
}

const tagBits = 6

// tag is the part of a hash a slot carries: bits neither the shard nor the
// slot number uses.
func tag(h uint64) uintptr { return uintptr(h >> (64 - tagBits)) }

// tagged returns c's address tagged with h's tag.
func tagged(c *cell, h uint64) *byte { return (*byte)(unsafe.Add(unsafe.Pointer(c), tag(h))) }

// untag splits a slot's value into its cell and tag.
func untag(p *byte) (*cell, uintptr) {
	t := uintptr(unsafe.Pointer(p)) & (1<<tagBits - 1)
	return (*cell)(unsafe.Add(unsafe.Pointer(p), -int(t))), t
}

// slot picks a start slot from bits the shard index does not use.
func (ix *index) slot(h uint64) uint64 { return (h >> 32) & ix.mask }

// find returns the cell for (name, key), or nil. Safe without the lock.
func (ix *index) find(h uint64, name, key string) *cell {
	c, _ := ix.lookup(h, name, key)
	return c
}

// lookup returns the cell for (name, key) and its slot, or nil and -1.
// Safe without the lock.
func (ix *index) lookup(h uint64, name, key string) (*cell, int) {
	tg := tag(h)
	for i := ix.slot(h); ; i = (i + 1) & ix.mask {
		p := ix.slots[i].Load()
		if p == nil {
			return nil, -1
		}
		if c, t := untag(p); t == tg && c.key == key && c.name == name {
			return c, int(i)
		}
	}
}

// table is a shard's index and its count. Every method but find needs the
// shard lock.
type table struct {
	idx   atomic.Pointer[index]
	n     int
	bytes int64 // entryBytes of every cell held
	// hash is the hash of a key the table was given with it (the store's
	// hash); rebuild and remove recompute it rather than store it.
	hash func(key string) uint64
}

func (t *table) init(hash func(string) uint64) {
	t.hash = hash
	t.idx.Store(newIndex(8))
}

// find returns the cell for (name, key), or nil. Safe without the lock.
func (t *table) find(h uint64, name, key string) *cell { return t.idx.Load().find(h, name, key) }

// cellAt returns the cell in slot i, or nil.
func (ix *index) cellAt(i int) *cell {
	p := ix.slots[i].Load()
	if p == nil {
		return nil
	}
	c, _ := untag(p)
	return c
}

// insert adds a cell for a (name, key) the table does not hold.
func (t *table) insert(h uint64, c *cell) {
	if uintptr(unsafe.Pointer(c))&(1<<tagBits-1) != 0 {
		panic("memstore: cell not 64-byte aligned")
	}
	ix := t.idx.Load()
	if 2*(t.n+1) > len(ix.slots) {
		ix = t.rebuild(max(8, 4*(t.n+1)))
	}
	ix.place(h, tagged(c, h))
	t.n++
	t.bytes += entryBytes(c.key)
}

func (ix *index) place(h uint64, p *byte) {
	i := ix.slot(h)
	for ix.slots[i].Load() != nil {
		i = (i + 1) & ix.mask
	}
	ix.slots[i].Store(p)
}

// rebuild publishes a new generation with room for at least n slots,
// holding every cell of the current one that is not dead.
func (t *table) rebuild(n int) *index {
	size := 8
	for size < n {
		size <<= 1
	}
	old := t.idx.Load()
	ix := newIndex(size)
	for i := range old.slots {
		if c := old.cellAt(i); c != nil && c.time.Load() != dead {
			ix.place(t.hash(c.key), old.slots[i].Load())
		}
	}
	t.idx.Store(ix)
	return ix
}

// remove kills the cell for (name, key), if the table holds one, and
// drops it, shifting later cells of its probe run back so that lookups
// under the lock never stop early. The kill comes first and is
// unconditional: a lock-free take that loaded the cell then fails its swap
// and starts over under the lock.
func (t *table) remove(h uint64, name, key string) {
	ix := t.idx.Load()
	c, i := ix.lookup(h, name, key)
	if c == nil {
		return
	}
	c.time.Store(dead)
	mask := int(ix.mask)
	for j := (i + 1) & mask; ix.slots[j].Load() != nil; j = (j + 1) & mask {
		home := int(ix.slot(t.hash(ix.cellAt(j).key)))
		// Move slot j into the hole at i unless its home lies cyclically
		// in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			ix.slots[i].Store(ix.slots[j].Load())
			i = j
		}
	}
	ix.slots[i].Store(nil)
	t.n--
	t.bytes -= entryBytes(c.key)
}

// testHookSweep, when set by a test, runs between a sweep's finding a cell
// fresh and its killing it.
var testHookSweep func(*cell)

// sweep drops every cell fresh at now, publishing a generation sized to
// what is left, and returns the earliest fresh time of the rest. A GCRA
// cell that a lock-free take charges while the sweep looks at it stays.
func (t *table) sweep(now int64) (minFresh int64) {
	minFresh = math.MaxInt64
	keep := 0
	var bytes int64
	ix := t.idx.Load()
	for i := range ix.slots {
		c := ix.cellAt(i)
		if c == nil {
			continue
		}
		// A frozen cell (a multi-key take making room) is not fresh:
		// its lock holder thaws it.
		if fa := c.freshTime(); live(fa) && fa <= now {
			if testHookSweep != nil {
				testHookSweep(c)
			}
			if c.kill(fa) {
				continue
			}
		}
		keep++
		bytes += entryBytes(c.key)
		minFresh = min(minFresh, c.freshTime())
	}
	t.n, t.bytes = keep, bytes
	t.rebuild(max(8, 2*keep))
	return minFresh
}
