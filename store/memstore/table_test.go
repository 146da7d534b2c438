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
	tb := table{hash: hashOf}
	for step := range 50_000 {
		key := fmt.Sprintf("k%d", rng.IntN(200))
		name := []string{"a", "b"}[rng.IntN(2)]
		h := hashOf(key)
		switch op := rng.IntN(10); {
		case op < 5:
			v := int64(rng.IntN(1000))
			if e := tb.get(h, name, key); e != nil {
				e.freshAt = v
			} else {
				tb.insert(h, name, key, store.State{Time: v}, v)
			}
			ref[k{name, key}] = v
		case op < 9:
			if i := tb.find(h, name, key); i >= 0 {
				tb.delete(i)
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
				e := tb.get(hashOf(kk.key), kk.name, kk.key)
				require.NotNil(t, e, "step %d: %v lost", step, kk)
				require.Equal(t, v, e.freshAt)
			}
		}
	}
}

func TestShardLayout(t *testing.T) {
	t.Parallel()
	// The decision path's fields fill the first cache line, and a shard is
	// two lines so that every shard's hot line is its own.
	require.Equal(t, uintptr(128), unsafe.Sizeof(shard{}))
	require.Equal(t, uintptr(56), unsafe.Offsetof(shard{}.minFresh))
	require.Equal(t, uintptr(64), unsafe.Offsetof(shard{}.nextSweep))
}
