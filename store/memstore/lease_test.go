package memstore_test

import (
	"testing"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/memstore"
	"github.com/sluicerl/sluice/store/storetest"
)

func TestLeaseConformance(t *testing.T) {
	t.Parallel()
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return memstore.NewLeases(memstore.LeasesConfig{}) })
}

func TestLeaseConformanceShared(t *testing.T) {
	t.Parallel()
	l := memstore.NewLeases(memstore.LeasesConfig{})
	storetest.RunLeases(t, func(*testing.T) store.LeaseStore { return l })
}

func TestLeaseDifferentialSelf(t *testing.T) {
	t.Parallel()
	// Two memstores number tokens alike only by chance: the mapping must
	// hold anyway.
	storetest.LeaseDifferential(t, memstore.NewLeases(memstore.LeasesConfig{}), memstore.NewLeases(memstore.LeasesConfig{}), 1, 3000)
}

func TestLeaseAcrossStores(t *testing.T) {
	t.Parallel()
	l := memstore.NewLeases(memstore.LeasesConfig{})
	storetest.LeaseAcrossStores(t, l, l)
}
