package memstore

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestTableMatchesMap drives the open-addressed table and a Go map with the
// same random inserts, updates, deletes and sweeps, with hashes forced to
// collide often, and checks they always hold the same entries.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	type k struct{ name, key string }
	ref := map[k]int64{}
	hashOf := func(key string) uint64 {
		// 16 distinct hashes for 200 keys: long probe runs and wrap-around.
		var h uint64
		for _, c := range key {
			h = h*31 + uint64(c)
		}
		return (h % 16) << 32
	}
	var tb table
	tb.init(hashOf)
	// Keys of name "a" hold GCRA cells (fresh at their time), of "b"
	// window cells (fresh at freshAt).
	freshOf := func(c *cell) int64 { return c.freshTime() }
	for step := range 50_000 {
		key := fmt.Sprintf("k%d", rng.IntN(200))
		name := []string{"a", "b"}[rng.IntN(2)]
		h := hashOf(key)
		switch op := rng.IntN(10); {
		case op < 5:
			v := int64(rng.IntN(1000))
			if c := tb.find(h, name, key); c != nil {
				c.freeze()
				c.thaw(store.State{Time: v}, v)
			} else {
				tb.insert(h, newCell(name, key, name == "a", store.State{Time: v}, v))
			}
			ref[k{name, key}] = v
		case op < 9:
			c := tb.find(h, name, key)
			tb.remove(h, name, key)
			require.Nil(t, tb.find(h, name, key))
			if c != nil {
				require.Equal(t, int64(dead), c.time.Load(), "a removed cell is dead")
			}
			delete(ref, k{name, key})
		default:
			now := int64(rng.IntN(1000))
			tb.sweep(now)
			for kk, v := range ref {
				if v <= now {
					delete(ref, kk)
				}
			}
		}
		require.Equal(t, len(ref), tb.n, "step %d", step)
		if step%97 == 0 {
			for kk, v := range ref {
				c := tb.find(hashOf(kk.key), kk.name, kk.key)
				require.NotNil(t, c, "step %d: %v lost", step, kk)
				require.Equal(t, v, freshOf(c))
				require.True(t, live(c.time.Load()))
			}
		}
	}
}

func TestShardLayout(t *testing.T) {
	t.Parallel()
	// A lock-free decision reads the table's index pointer, in the first
	// cache line; the lock and what it guards fill the second, so that
	// slow paths elsewhere in the shard do not evict the first.
	require.Equal(t, uintptr(128), unsafe.Sizeof(shard{}))
	require.Equal(t, uintptr(0), unsafe.Offsetof(shard{}.t))
	require.LessOrEqual(t, unsafe.Sizeof(table{}), uintptr(64))
	// A cell is one cache line.
	require.Equal(t, uintptr(64), unsafe.Sizeof(cell{}))
	require.Equal(t, uintptr(64), unsafe.Offsetof(shard{}.mu))
}
