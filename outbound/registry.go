package outbound

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicerl/sluice/clock"
)

// registryShards is how many independently locked maps hold the keys: a
// call takes one shard's read lock to find its key, so calls to different
// keys rarely meet on a lock, and never on one every call takes.
const registryShards = 64

// minSweepEvery bounds how often the idle sweep runs, whatever IdleTTL.
const minSweepEvery = time.Second

// registry holds the client's keys, sharded by the key's hash, and drops
// idle ones: on a timer while it holds any, and when a new key arrives
// while maxKeys are held. It is safe for concurrent use.
type registry struct {
	clk      clock.Clock
	idleTTL  time.Duration
	maxKeys  int64
	newKey   func(key, label string, now int64) *keyState
	seed     maphash.Seed
	shards   [registryShards]registryShard
	count    atomic.Int64
	sweeping atomic.Bool // a sweep goroutine is waiting on its timer
	evicting sync.Mutex  // one eviction pass at a time
	onSweep  func()      // tests: after every timed sweep and its next timer
}

type registryShard struct {
	mu   sync.RWMutex
	keys map[string]*keyState
	_    [32]byte // to 64 bytes: shards' locks off each other's cache lines
}

func newRegistry(clk clock.Clock, idleTTL time.Duration, maxKeys int, newKey func(key, label string, now int64) *keyState) *registry {
	r := &registry{clk: clk, idleTTL: idleTTL, maxKeys: int64(maxKeys), newKey: newKey, seed: maphash.MakeSeed()}
	for i := range r.shards {
		r.shards[i].keys = make(map[string]*keyState)
	}
	return r
}

func (r *registry) shard(key string) *registryShard {
	return &r.shards[maphash.String(r.seed, key)%registryShards]
}

// lookup returns key's state, if held, without marking it in use.
func (r *registry) lookup(key string) (*keyState, bool) {
	sh := r.shard(key)
	sh.mu.RLock()
	ks, ok := sh.keys[key]
	sh.mu.RUnlock()
	return ks, ok
}

// acquire returns key's state, making it if need be, and marks it in use
// until release: an eviction never drops it meanwhile.
func (r *registry) acquire(key, label string) *keyState {
	sh := r.shard(key)
	sh.mu.RLock()
	ks := sh.keys[key]
	if ks != nil {
		ks.users.Add(1) // under the shard's lock: no eviction in between
	}
	sh.mu.RUnlock()
	if ks != nil {
		return ks
	}
	now := r.clk.Now().UnixMicro()
	if r.count.Load() >= r.maxKeys {
		r.evict(now)
	}
	added := false
	sh.mu.Lock()
	if ks = sh.keys[key]; ks == nil {
		ks = r.newKey(key, label, now)
		sh.keys[key] = ks
		r.count.Add(1)
		added = true
	}
	ks.users.Add(1)
	sh.mu.Unlock()
	if added {
		r.startSweep()
	}
	return ks
}

// release ends a use that acquire began.
func (r *registry) release(ks *keyState) { ks.users.Add(-1) }

// all returns the keys held.
func (r *registry) all() []*keyState {
	out := make([]*keyState, 0, r.count.Load())
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.RLock()
		for _, ks := range sh.keys {
			out = append(out, ks)
		}
		sh.mu.RUnlock()
	}
	return out
}

// evict drops the keys idle for idleTTL at now (no outcome since, and no
// call holding them), one shard at a time. Their pacing state lives on in
// the store, so nothing is given away. A pass already running elsewhere
// is enough.
func (r *registry) evict(now int64) {
	if !r.evicting.TryLock() {
		return
	}
	defer r.evicting.Unlock()
	cut := now - r.idleTTL.Microseconds()
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for k, ks := range sh.keys {
			if ks.users.Load() == 0 && ks.lastActive.Load() < cut {
				delete(sh.keys, k)
				r.count.Add(-1)
			}
		}
		sh.mu.Unlock()
	}
}

// sweepEvery is the idle sweep's period: half the idle TTL, so that a key
// is dropped between IdleTTL and 1.5 IdleTTL after its last outcome.
func (r *registry) sweepEvery() time.Duration {
	return max(r.idleTTL/2, minSweepEvery)
}

// startSweep starts the idle sweep unless it runs. Its first timer is
// started here, before the new key's call goes on.
func (r *registry) startSweep() {
	if !r.sweeping.CompareAndSwap(false, true) {
		return
	}
	t := r.clk.NewTimer(r.sweepEvery())
	go r.sweep(t)
}

// sweep evicts idle keys every sweepEvery while the registry holds any,
// and ends when it holds none (the next new key starts it again), so that
// a client dropped with no keys leaves nothing running.
func (r *registry) sweep(t clock.Timer) {
	for {
		<-t.C()
		r.evict(r.clk.Now().UnixMicro())
		stop := false
		if r.count.Load() == 0 {
			r.sweeping.Store(false)
			// A key added since the count was read saw the sweep
			// running and started none: carry on for it, unless it
			// started one after all.
			stop = r.count.Load() == 0 || !r.sweeping.CompareAndSwap(false, true)
		}
		if !stop {
			t = r.clk.NewTimer(r.sweepEvery())
		}
		if r.onSweep != nil {
			r.onSweep()
		}
		if stop {
			return
		}
	}
}
