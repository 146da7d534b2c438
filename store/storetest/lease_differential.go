package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// LeaseDifferential runs n random lease operations (acquire, renew,
// release, holders, fenced write and read over two keys, three holders,
// one to three permits and TTLs of 1 to 5 s, stale tokens included)
// against got and the reference want (a fresh memstore.NewLeases) with the
// same non-decreasing Now sequence, and fails at the first answer that
// differs. Backends number their tokens their own way (per key or for the
// whole store), so tokens are compared through the per-key mapping the
// acquires establish, which must stay a bijection that preserves order. Names carry a random tag, so got may be
// shared with other tests.
func LeaseDifferential(t *testing.T, got, want store.LeaseStore, seed uint64, n int) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, seed^0x1ea5e))
	name := fmt.Sprintf("leasediff/%016x", rand.Uint64())
	keys := []string{"a", "b"}
	holders := []string{"h1", "h2", "h3"}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	type tok struct {
		key string
		t   int64
	}
	toWant := map[tok]int64{} // (key, got token) -> want token
	toGot := map[tok]int64{}
	var known []store.Lease // leases want granted (want tokens), stale ones included
	mapTok := func(i int, key string, g, w int64) {
		if m, ok := toWant[tok{key, g}]; ok {
			require.Equal(t, m, w, "op %d: got token %d of %s maps to want %d and %d", i, g, key, m, w)
			return
		}
		if m, ok := toGot[tok{key, w}]; ok {
			require.Equal(t, m, g, "op %d: want token %d of %s maps to got %d and %d", i, w, key, m, g)
		}
		for gg, ww := range toWant {
			if gg.key == key {
				require.Equal(t, gg.t < g, ww < w, "op %d: token order of %s differs (%d/%d vs %d/%d)", i, key, gg.t, ww, g, w)
			}
		}
		toWant[tok{key, g}], toGot[tok{key, w}] = w, g
	}
	gotTok := func(key string, w int64) int64 {
		if g, ok := toGot[tok{key, w}]; ok {
			return g
		}
		return w + 1<<40 // never issued on either side
	}
	pick := func() store.Lease {
		if len(known) == 0 || rng.IntN(10) == 0 {
			return store.Lease{Name: name, Key: keys[rng.IntN(2)], Holder: holders[rng.IntN(3)], Token: rng.Int64N(5) + 1}
		}
		return known[rng.IntN(len(known))]
	}
	for i := range n {
		now = now.Add(time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))).Truncate(time.Microsecond)
		switch op := rng.IntN(10); {
		case op < 4:
			p := store.AcquireParams{Name: name, Key: keys[rng.IntN(2)], Holder: holders[rng.IntN(3)],
				Permits: rng.Int64N(3) + 1, TTL: time.Duration(rng.Int64N(5)+1) * time.Second, Now: now}
			g, errG := got.Acquire(ctx, p)
			w, errW := want.Acquire(ctx, p)
			require.NoError(t, errW)
			require.NoError(t, errG, "op %d: acquire %+v", i, p)
			if w.Acquired {
				mapTok(i, p.Key, g.Lease.Token, w.Lease.Token)
				g.Lease.Token = w.Lease.Token
				known = append(known, w.Lease)
			}
			require.Equal(t, w, g, "op %d: acquire %+v", i, p)
		case op < 6:
			l := pick()
			p := store.RenewParams{Name: name, Key: l.Key, Holder: l.Holder, Token: l.Token, TTL: time.Duration(rng.Int64N(5)+1) * time.Second, Now: now}
			w, errW := want.Renew(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			g, errG := got.Renew(ctx, p)
			require.Equal(t, errW, errG, "op %d: renew %+v", i, p)
			g.Token = l.Token
			if errW == nil {
				require.Equal(t, w, g, "op %d: renew %+v", i, p)
			}
		case op < 8:
			l := pick()
			p := store.ReleaseParams{Name: name, Key: l.Key, Holder: l.Holder, Token: l.Token, Now: now}
			errW := want.Release(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			errG := got.Release(ctx, p)
			require.Equal(t, errW, errG, "op %d: release %+v", i, p)
		case op < 9:
			k := keys[rng.IntN(2)]
			w, errW := want.Holders(ctx, store.HoldersParams{Name: name, Key: k, Now: now})
			require.NoError(t, errW)
			g, errG := got.Holders(ctx, store.HoldersParams{Name: name, Key: k, Now: now})
			require.NoError(t, errG)
			for j := range g {
				g[j].Token = toWant[tok{k, g[j].Token}]
			}
			require.Equal(t, w, g, "op %d: holders of %s", i, k)
		default:
			l := pick()
			v := []byte(fmt.Sprint("v", i))
			p := store.FencedWriteParams{Name: name, Key: l.Key, Token: l.Token, Field: "f", Value: v, Now: now}
			errW := want.FencedWrite(ctx, p)
			p.Token = gotTok(l.Key, l.Token)
			errG := got.FencedWrite(ctx, p)
			if !errors.Is(errW, errG) {
				require.Equal(t, errW, errG, "op %d: fenced write %+v", i, p)
			}
			rp := store.FencedReadParams{Name: name, Key: l.Key, Field: "f"}
			wv, wok, errW := want.FencedRead(ctx, rp)
			require.NoError(t, errW)
			gv, gok, errG := got.FencedRead(ctx, rp)
			require.NoError(t, errG)
			require.Equal(t, wok, gok, "op %d: fenced read", i)
			if wok {
				require.Equal(t, wv.Token, toWant[tok{l.Key, gv.Token}], "op %d: fenced read token", i)
				require.True(t, slices.Equal(wv.Value, gv.Value), "op %d: fenced read %q, want %q", i, gv.Value, wv.Value)
			}
		}
	}
}
