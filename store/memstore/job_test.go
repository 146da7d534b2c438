package memstore_test

import (
	"testing"

	"github.com/sluicerl/sluice/store"
	"github.com/sluicerl/sluice/store/jobtest"
	"github.com/sluicerl/sluice/store/memstore"
)

func TestJobStoreConformance(t *testing.T) {
	t.Parallel()
	jobtest.Run(t, func(t *testing.T) store.JobStore { return memstore.NewJobStore(memstore.JobConfig{}) })
}
