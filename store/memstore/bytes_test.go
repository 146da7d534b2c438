package memstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
)

// TestMaxBytesRefusesInsteadOfEvicting fills a store with long keys that
// all still hold state, far below MaxKeys: the byte bound refuses new keys
// once reached, keeps every key's debt, and says so in Stats; once the
// keys' state becomes fresh, new keys take their place and Stats counts the
// eviction.
func TestMaxBytesRefusesInsteadOfEvicting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const keyLen = 400
	const maxBytes = 20 * (keyLen + EntryOverhead) // 20 such keys
	for _, shards := range []int{1, 4} {
		s := New(Config{Shards: shards, MaxBytes: maxBytes})
		slow := store.Limit{Name: "slow", Rate: 1, Period: time.Hour, Burst: 1}
		key := func(i int) string { return strconv.Itoa(i) + strings.Repeat("k", keyLen-len(strconv.Itoa(i))) }
		var held []int
		refused := 0
		for i := range 200 {
			res, err := s.Take(ctx, store.TakeParams{Key: key(i), Limit: slow, Cost: 1, Now: base})
			if err != nil {
				require.ErrorIs(t, err, store.ErrTooManyKeys)
				refused++
				continue
			}
			require.True(t, res.Allowed)
			held = append(held, i)
		}
		st := s.Stats()
		require.Positive(t, refused, "%d shards: the byte bound never refused a key", shards)
		require.LessOrEqual(t, len(held), 20)
		require.Equal(t, len(held), st.Keys)
		require.Equal(t, int64(len(held))*(keyLen+EntryOverhead), st.Bytes)
		require.LessOrEqual(t, st.Bytes, int64(maxBytes))
		require.Equal(t, int64(maxBytes), st.MaxBytes)
		require.Equal(t, int64(refused), st.Refused)
		require.Zero(t, st.Evicted, "no state was fresh: nothing may be evicted")
		// Every held key still owes its hour.
		for _, i := range held {
			res, err := s.Take(ctx, store.TakeParams{Key: key(i), Limit: slow, Cost: 1, Now: base.Add(time.Minute)})
			require.NoError(t, err)
			require.False(t, res.Allowed, "key %d was forgotten: its budget came back", i)
		}
		// A multi-key take with a new key is refused whole and charges
		// nothing.
		_, err := s.TakeAll(ctx, store.TakeAllParams{Now: base.Add(time.Minute), Items: []store.Item{
			{Key: key(held[0]), Limit: slow, Cost: 0}, {Key: key(1000), Limit: slow, Cost: 1},
		}})
		if err != nil {
			require.ErrorIs(t, err, store.ErrTooManyKeys)
		}

		// An hour on, every key is fresh again: new keys evict them. (With
		// several shards the bound is per shard, and new keys may crowd
		// one: it refuses what it cannot hold.)
		later := base.Add(time.Hour + time.Second)
		admitted := 0
		for i := 2000; i < 2000+len(held); i++ {
			res, err := s.Take(ctx, store.TakeParams{Key: key(i), Limit: slow, Cost: 1, Now: later})
			if shards > 1 && err != nil {
				require.ErrorIs(t, err, store.ErrTooManyKeys)
				continue
			}
			require.NoError(t, err, "%d shards: key %d", shards, i)
			require.True(t, res.Allowed)
			admitted++
		}
		require.Positive(t, admitted)
		st = s.Stats()
		require.Positive(t, st.Evicted)
		require.LessOrEqual(t, st.Bytes, int64(maxBytes))
	}
}

// TestMaxBytesDefault: a zero Config bounds bytes by DefaultMaxBytes.
func TestMaxBytesDefault(t *testing.T) {
	t.Parallel()
	s := New(Config{})
	require.Equal(t, int64(DefaultMaxBytes), s.Stats().MaxBytes)
	// A bound below one longest key still admits one per shard.
	s = New(Config{Shards: 1, MaxBytes: 1})
	_, err := s.Take(context.Background(), store.TakeParams{Key: strings.Repeat("k", store.MaxIDBytes), Limit: store.Limit{Name: "n", Rate: 1, Period: time.Hour}, Cost: 1})
	require.NoError(t, err)
}

// TestLeasesMaxBytes: live leases count against MaxBytes; an acquire
// beyond it fails with ErrTooManyKeys and takes nothing from a live holder;
// once the leases expire, or one is released, new ones fit again.
func TestLeasesMaxBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	perLease := int64(1+500+200) + EntryOverhead
	// The per-shard floor is one lease of the longest kind: 1376 bytes,
	// room for one of these leases per shard.
	l := NewLeases(LeasesConfig{MaxBytes: 1})
	require.Less(t, perLease, l.maxBytes)
	require.Greater(t, 2*perLease, l.maxBytes)
	holder := strings.Repeat("h", 200)
	key := func(i int) string { return strconv.Itoa(i) + strings.Repeat("k", 500-len(strconv.Itoa(i))) }
	acquire := func(i int, at time.Time) (store.AcquireResult, error) {
		return l.Acquire(ctx, store.AcquireParams{Name: "n", Key: key(i), Holder: holder, Permits: 1, TTL: time.Minute, Now: at})
	}
	var held []int
	refused := 0
	for i := range 4 * leaseShards {
		res, err := acquire(i, base)
		if err != nil {
			require.ErrorIs(t, err, store.ErrTooManyKeys)
			refused++
			continue
		}
		require.True(t, res.Acquired)
		held = append(held, i)
	}
	require.LessOrEqual(t, len(held), leaseShards)
	require.Positive(t, refused)
	require.Equal(t, int64(refused), l.Stats().Refused)
	// Every live lease is still held.
	for _, i := range held {
		hs, err := l.Holders(ctx, store.HoldersParams{Name: "n", Key: key(i), Now: base.Add(time.Second)})
		require.NoError(t, err)
		require.Len(t, hs, 1)
	}
	// Releasing one makes room in its shard: the same key fits again.
	hs, err := l.Holders(ctx, store.HoldersParams{Name: "n", Key: key(held[0]), Now: base})
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx, store.ReleaseParams{Name: "n", Key: key(held[0]), Holder: holder, Token: hs[0].Token, Now: base}))
	res, err := acquire(held[0], base.Add(time.Second))
	require.NoError(t, err)
	require.True(t, res.Acquired)
	// A minute on, every lease has expired: the refused keys fit now.
	admitted := 0
	for i := range 4 * leaseShards {
		if res, err := acquire(i, base.Add(2*time.Minute)); err == nil && res.Acquired {
			admitted++
		}
	}
	require.GreaterOrEqual(t, admitted, len(held))
}

// TestLeasesMaxBytesFromRates: a Leases built on a rate store takes its
// byte bound unless given one.
func TestLeasesMaxBytesFromRates(t *testing.T) {
	t.Parallel()
	rates := New(Config{MaxBytes: 64 << 20})
	require.Equal(t, int64(64<<20)/leaseShards, NewLeases(LeasesConfig{Rates: rates}).maxBytes)
	require.Equal(t, int64(DefaultMaxBytes)/leaseShards, NewLeases(LeasesConfig{}).maxBytes)
	require.Equal(t, int64(1<<20)/leaseShards, NewLeases(LeasesConfig{Rates: rates, MaxBytes: 1 << 20}).maxBytes)
}
