package redisstore

import (
	"testing"

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
