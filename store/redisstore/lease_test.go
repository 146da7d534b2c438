package redisstore

import (
	"testing"

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
