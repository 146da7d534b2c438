package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t), Config{})
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return s })
}

func TestLeaseConformanceCluster(t *testing.T) {
	t.Parallel()
	s := newStore(t, clusterClient(t), Config{})
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return s })
}

func TestLeaseConformanceRing(t *testing.T) {
	t.Parallel()
	s := newStore(t, ringClient(t), Config{})
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return s })
}

func TestLeaseDifferential(t *testing.T) {
	t.Parallel()
	s := newStore(t, single(t), Config{})
	storetest.LeaseDifferential(t, s, memstore.NewLeases(memstore.LeasesConfig{}), 7, 1500)
}

func TestLeaseAcrossStores(t *testing.T) {
	t.Parallel()
	a := newStore(t, single(t), Config{})
	b, err := New(single(t), Config{Prefix: a.Prefix()})
	require.NoError(t, err)
	storetest.LeaseAcrossStores(t, a, b)
}

// TestLeaseTokensOutliveTheirHash: the permits' hash vanishes when its last
// lease ends (or is evicted); the key's counter does not, so the next token
// is still greater. Real time: Redis expires keys on its own clock.
func TestLeaseTokensOutliveTheirHash(t *testing.T) {
	t.Parallel()
	c := single(t)
	s := newStore(t, c, Config{})
	ctx := context.Background()
	h, seq, _, _ := leaseKeys(s.prefix, "n", "k")
	acquire := func(ttl time.Duration) int64 {
		t.Helper()
		res, err := s.Acquire(ctx, store.AcquireParams{Name: "n", Key: "k", Holder: "h", Permits: 1, TTL: ttl})
		require.NoError(t, err)
		require.True(t, res.Acquired)
		return res.Lease.Token
	}
	first := acquire(5 * time.Millisecond)
	require.Eventually(t, func() bool { return c.Exists(ctx, h).Val() == 0 }, time.Minute, 5*time.Millisecond,
		"the hash expires with its last lease")
	second := acquire(time.Minute)
	require.Greater(t, second, first, "after the hash expired")
	require.NoError(t, c.Del(ctx, h).Err()) // evicted, or deleted by hand
	third := acquire(time.Minute)
	require.Greater(t, third, second, "after the hash was deleted")
	ttl, err := c.PTTL(ctx, seq).Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "the counter never expires")
}

// FuzzLeaseDifferential runs storetest.FuzzLeaseDifferential against one
// Redis store shared by every input (SLUICE_INTEGRATION=1).
func FuzzLeaseDifferential(f *testing.F) {
	s := newStore(f, single(f), Config{})
	storetest.FuzzLeaseDifferential(f, func(*testing.T) store.LeaseStore { return s },
		func() store.LeaseStore { return memstore.NewLeases(memstore.LeasesConfig{}) })
}
