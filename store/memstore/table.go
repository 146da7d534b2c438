package memstore

import "github.com/sluicerl/sluice/store"

// entry is one (limit name, key) state, kept by value in a shard's table so
// that finding a key and reading its state touch one slot, with no pointer
// to follow. The hash of the key alone picks both the shard and the slot,
// so a decision hashes its key once.
//
// An entry is 64 bytes, one cache line: a lookup that finds its key in the
// first slot it probes touches one line. A slot is empty when its key is
// (stored keys are never empty).
type entry struct {
	key, name string
	st        store.State
	freshAt   int64 // Unix µs at which st equals a fresh key
}

// table is an open-addressed hash table with linear probing, at most half
// full. (Three quarters full halves the memory but measured 4-8% slower per
// decision at 10,000 keys: the longer probe runs cost more than the smaller
// table saves.) Pointers it returns are valid until the next insert, delete or
// rebuild.
type table struct {
	slots []entry // length a power of two
	n     int
	// hash is the hash of a key the table was given with it (the store's
	// hash); resize and delete recompute it rather than store it.
	hash func(key string) uint64
}

// slot picks a start slot from bits the shard index does not use.
func (t *table) slot(h uint64) int { return int((h >> 32) & uint64(len(t.slots)-1)) }

func (t *table) get(h uint64, name, key string) *entry {
	if i := t.find(h, name, key); i >= 0 {
		return &t.slots[i]
	}
	return nil
}

// find returns the slot holding (name, key), or -1.
func (t *table) find(h uint64, name, key string) int {
	if t.n == 0 {
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.slot(h); ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.key == "" {
			return -1
		}
		if e.key == key && e.name == name {
			return i
		}
	}
}

// insert adds an entry for a (name, key) the table does not hold.
func (t *table) insert(h uint64, name, key string, st store.State, freshAt int64) {
	if 2*(t.n+1) > len(t.slots) {
		t.resize(max(8, 4*(t.n+1)))
	}
	t.place(h, entry{name: name, key: key, st: st, freshAt: freshAt})
	t.n++
}

func (t *table) place(h uint64, e entry) {
	mask := len(t.slots) - 1
	i := t.slot(h)
	for t.slots[i].key != "" {
		i = (i + 1) & mask
	}
	t.slots[i] = e
}

// resize rebuilds the table with room for at least n slots.
func (t *table) resize(n int) {
	size := 8
	for size < n {
		size <<= 1
	}
	old := t.slots
	t.slots = make([]entry, size)
	for i := range old {
		if old[i].key != "" {
			t.place(t.hash(old[i].key), old[i])
		}
	}
}

// delete removes the entry in slot i (from find), shifting later entries
// of its probe run back so that lookups never stop early.
func (t *table) delete(i int) {
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].key != ""; j = (j + 1) & mask {
		home := t.slot(t.hash(t.slots[j].key))
		// Move slot j into the hole at i unless its home lies cyclically
		// in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = entry{}
	t.n--
}

// sweep drops every entry fresh at now, rebuilding the table at a size
// that fits what is left, and returns the earliest fresh time of the rest.
func (t *table) sweep(now int64) (minFresh int64) {
	minFresh = 1<<63 - 1
	keep := 0
	for i := range t.slots {
		e := &t.slots[i]
		if e.key == "" {
			continue
		}
		if e.freshAt <= now {
			*e = entry{}
			continue
		}
		keep++
		minFresh = min(minFresh, e.freshAt)
	}
	t.n = keep
	t.resize(max(8, 2*keep))
	return minFresh
}
