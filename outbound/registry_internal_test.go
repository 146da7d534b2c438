package outbound

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/clock/clocktest"
	"github.com/sluicerl/sluice/store/memstore"
)

var regT0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// sweeps returns a channel that receives after every timed sweep of r.
func sweeps(r *registry) <-chan struct{} {
	ch := make(chan struct{}, 16)
	r.onSweep = func() { ch <- struct{}{} }
	return ch
}

func waitSweep(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatal("no sweep")
	}
}

func testRegistry(clk *clocktest.Clock, ttl time.Duration, maxKeys int) *registry {
	return newRegistry(clk, ttl, maxKeys, func(key, label string, now int64) *keyState {
		ks := &keyState{key: key, label: label}
		ks.lastActive.Store(now)
		return ks
	})
}

// Idle keys go on a timer of the injected clock, every IdleTTL/2, not only
// when MaxKeys are held; a key in use never goes; the sweep stops when no
// key is left and starts again with the next one.
func TestRegistrySweepsIdleKeysOnATimer(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(regT0)
	r := testRegistry(clk, time.Minute, 1000)
	swept := sweeps(r)
	require.Zero(t, clk.Timers(), "no keys, no sweep")
	r.release(r.acquire("a", "a"))
	b := r.acquire("b", "b") // held throughout
	require.Equal(t, 1, clk.Timers(), "the first key starts one sweep")
	has := func(k string) bool { _, ok := r.lookup(k); return ok }

	for _, step := range []struct {
		at   time.Duration
		a, b bool
	}{
		{30 * time.Second, true, true}, // idle 30 s
		{60 * time.Second, true, true}, // idle 60 s: not yet more than the TTL
		{90 * time.Second, false, true},
	} {
		clk.BlockUntilTimers(1) // the sweep waits on the clock
		clk.Set(regT0.Add(step.at))
		waitSweep(t, swept)
		require.Equal(t, step.a, has("a"), "a at +%v", step.at)
		require.Equal(t, step.b, has("b"), "b at +%v", step.at)
	}
	r.release(b)
	clk.BlockUntilTimers(1)
	clk.Set(regT0.Add(120 * time.Second))
	waitSweep(t, swept)
	require.False(t, has("b"), "idle and released")
	require.Zero(t, r.count.Load())
	require.Zero(t, clk.Timers(), "the sweep ends with the last key")
	require.False(t, r.sweeping.Load())

	r.release(r.acquire("c", "c"))
	require.Equal(t, 1, clk.Timers(), "a new key starts the sweep again")
	clk.Set(regT0.Add(120*time.Second + 30*time.Second))
	waitSweep(t, swept)
	require.True(t, has("c"))
}

// The sweep's period is half the idle TTL, never under minSweepEvery.
func TestRegistrySweepPeriod(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(regT0)
	require.Equal(t, 5*time.Minute, testRegistry(clk, DefaultIdleTTL, 1).sweepEvery())
	require.Equal(t, minSweepEvery, testRegistry(clk, time.Millisecond, 1).sweepEvery())
}

// Keys spread over the shards, and concurrent acquires of one key get one
// state.
func TestRegistryShards(t *testing.T) {
	t.Parallel()
	r := testRegistry(clocktest.New(regT0), time.Minute, 100000)
	for i := range 1000 {
		r.release(r.acquire(fmt.Sprint("key", i), ""))
	}
	used := 0
	for i := range r.shards {
		if len(r.shards[i].keys) > 0 {
			used++
		}
	}
	require.Greater(t, used, registryShards/2, "1000 keys in %d of %d shards", used, registryShards)
	var wg sync.WaitGroup
	got := make([]*keyState, 8)
	for i := range got {
		wg.Go(func() { got[i] = r.acquire("shared", "") })
	}
	wg.Wait()
	for _, ks := range got {
		require.Same(t, got[0], ks)
	}
	require.EqualValues(t, len(got), got[0].users.Load())
	require.EqualValues(t, 1001, r.count.Load())
}

// A client's idle key goes on the timer: its local state is dropped, and
// the next call starts it afresh.
func TestClientDropsIdleKeysOnATimer(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(regT0)
	base := roundTrip(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
	})
	c, err := New(Config{Base: base, Clock: clk, Store: memstore.New(memstore.Config{Clock: clk}), IdleTTL: time.Minute})
	require.NoError(t, err)
	swept := sweeps(c.keys)
	req, err := http.NewRequest(http.MethodGet, "http://api.test/", nil)
	require.NoError(t, err)
	resp, err := c.RoundTrip(req)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	_, ok := c.Rate("api.test")
	require.True(t, ok)
	for i := 1; i <= 3; i++ {
		clk.BlockUntilTimers(1)
		clk.Advance(30 * time.Second)
		waitSweep(t, swept)
	}
	_, ok = c.Rate("api.test")
	require.False(t, ok, "idle 90 s with an idle TTL of 60 s")
	require.Empty(t, c.Snapshot(0).Keys)
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A key in use is never evicted, however idle and however full the
// registry: while a call holds it, its state is the one the registry
// hands out.
func TestRegistryNeverEvictsAKeyInUse(t *testing.T) {
	t.Parallel()
	clk := clocktest.New(regT0)
	r := testRegistry(clk, time.Minute, 4)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 300 {
				key := fmt.Sprint("k", (g*7+i)%16)
				ks := r.acquire(key, "")
				clk.Advance(2 * time.Minute) // every key idle
				// A new key while the registry is full: an
				// eviction pass (here, or one running elsewhere).
				fresh := r.acquire(fmt.Sprint("fresh", g, "-", i), "")
				got, ok := r.lookup(key)
				r.release(fresh)
				r.release(ks)
				if !ok || got != ks {
					t.Errorf("key %s evicted while in use", key)
					return
				}
			}
		})
	}
	wg.Wait()
	clk.Advance(2 * time.Minute)
	// A timed sweep woken by the advances may hold the eviction lock with
	// an earlier now, and then evict skips its own pass ("a pass running
	// elsewhere is enough"). The sweep reads the clock afresh each time it
	// wakes, so at most one such stale pass can come first: wait for any
	// running pass, evict, and look again.
	for range 3 {
		waitForPass(r)
		r.evict(clk.Now().UnixMicro())
		waitForPass(r) // and for one that began meanwhile
		if r.count.Load() == 0 {
			break
		}
	}
	require.Zero(t, r.count.Load(), "released and idle: all gone")
}

// waitForPass returns once no eviction pass is running.
func waitForPass(r *registry) {
	r.evicting.Lock() // a running pass holds it
	defer r.evicting.Unlock()
	_ = r.count.Load()
}
